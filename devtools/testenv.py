"""TEST-ONLY environment defaults, loaded by pytest before Django's settings (``-p devtools.testenv`` in
pyproject.toml's addopts; a conftest.py would be too late: pytest-django reads the settings first).

The values are labelled test-only. Subprocesses started by tests (``manage.py expire_reservations``) inherit them.
"""

import os

from skincare import demo

# The suite asks for development explicitly (unset is production, skincare/modes.py); the production tests start
# their own processes with DJANGO_ENV=production.
os.environ["DJANGO_ENV"] = "development"
os.environ.setdefault("DJANGO_SECRET_KEY", demo.TEST_SECRET_KEY)
os.environ.setdefault("PAYMENT_WEBHOOK_SECRET", demo.TEST_WEBHOOK_SECRET)
# The tests set what they need; the developer's .env (make run's demo settings, e.g. the sandbox) stays out.
os.environ.setdefault("DJANGO_READ_DOT_ENV_FILE", "false")
