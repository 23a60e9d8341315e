"""TEST-ONLY environment defaults, loaded by pytest before Django's settings (``-p devtools.testenv`` in
pyproject.toml's addopts; a conftest.py would be too late: pytest-django reads the settings first).

The values are labelled test-only. Subprocesses started by tests (``manage.py expire_reservations``) inherit them.
"""

import os

from devtools import devdb
from skincare import demo

# The suite asks for development explicitly (unset is production, config/modes.py); the production tests start
# their own processes with DJANGO_ENV=production.
os.environ["DJANGO_ENV"] = "development"
os.environ.setdefault("DJANGO_SECRET_KEY", demo.TEST_SECRET_KEY)
os.environ.setdefault("PAYMENT_WEBHOOK_SECRET", demo.TEST_WEBHOOK_SECRET)
# The tests set what they need; the developer's .env (make run's demo settings, e.g. the sandbox) stays out.
os.environ.setdefault("DJANGO_READ_DOT_ENV_FILE", "false")
# The database: DATABASE_URL when exported, else the embedded server that `make db` started (the settings read the
# variable only; they never look for the server themselves).
if not os.environ.get("DATABASE_URL") and devdb.url() is not None:
    os.environ["DATABASE_URL"] = devdb.url()
