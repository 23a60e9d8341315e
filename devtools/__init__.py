"""Development tooling: never imported by the application at run time, not installed in the production image.

- ``devdb``: the embedded PostgreSQL 18 that ``make run`` and ``make test`` use when ``DATABASE_URL`` is unset;
- ``pgbouncer``: a real PgBouncer in transaction mode in front of it (tests, rehearsals);
- ``processes``: local servers and commands (databases, ``manage.py``, gunicorn, sweepers, free ports) for
  rehearsals and benchmarks;
- ``testenv`` / ``testing``: test-only settings and the concurrency helpers the race tests use;
- ``djangoctl``: bulk seeding helpers (tokens, products) for load runs;
- ``scaleout``: ``make scaleout``, the scale-out rehearsal; ``failover`` (with ``patroni``, ``failover_proof``):
  ``make failover``; ``mutate``: ``make mutate``, mutation testing.
"""
