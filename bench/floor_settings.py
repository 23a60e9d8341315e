"""Settings of the framework's floor (bench.floor): the service's database connection, nothing else.

``DATABASES`` (and the secret key, hosts and time zone) come from the project's settings unchanged, so the floor's
connection is configured exactly as the service's (server-side prepared statements on a direct connection, the
timeouts, persistent connections); no installed app, no middleware, Django's default logging.
"""

import importlib
import os
from pathlib import Path

# The project's settings module: config.settings, or skincare.settings in a tree from before config/ existed.
_project = importlib.import_module(
    "config.settings"
    if (Path(__file__).resolve().parent.parent / "config/settings.py").exists()
    else "skincare.settings"
)
ALLOWED_HOSTS, DATABASES, DEBUG = _project.ALLOWED_HOSTS, _project.DATABASES, _project.DEBUG
SECRET_KEY, TIME_ZONE, USE_TZ = _project.SECRET_KEY, _project.TIME_ZONE, _project.USE_TZ

INSTALLED_APPS: list[str] = []
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "bench.floor"
# The customer every floor order is placed by: the one pgbench's seed script uses (bench.seeding's first customer).
FLOOR_CUSTOMER_ID = int(os.environ.get("BENCH_FLOOR_CUSTOMER", "0"))
