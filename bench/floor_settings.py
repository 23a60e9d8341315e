"""Settings of the framework's floor (bench.floor): the service's database connection, nothing else.

``DATABASES`` (and the secret key, hosts and time zone) come from skincare.settings unchanged, so the floor's
connection is configured exactly as the service's (server-side prepared statements on a direct connection, the
timeouts, persistent connections); no installed app, no middleware, Django's default logging.
"""

import os

from skincare.settings import ALLOWED_HOSTS, DATABASES, DEBUG, SECRET_KEY, TIME_ZONE, USE_TZ

__all__ = ["ALLOWED_HOSTS", "DATABASES", "DEBUG", "SECRET_KEY", "TIME_ZONE", "USE_TZ"]

INSTALLED_APPS: list[str] = []
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "bench.floor"
# The customer every floor order is placed by: the one pgbench's seed script uses (bench.seeding's first customer).
FLOOR_CUSTOMER_ID = int(os.environ.get("BENCH_FLOOR_CUSTOMER", "0"))
