"""Load tests (Locust) and the throughput benchmark. Tooling only: nothing here is imported by the product."""
