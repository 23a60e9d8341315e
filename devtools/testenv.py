"""TEST-ONLY environment defaults, loaded by pytest before Django's settings (``-p devtools.testenv`` in
pyproject.toml's addopts; a conftest.py would be too late: pytest-django reads the settings first).

The values are labelled test-only. Subprocesses started by tests (``manage.py expire_reservations``) inherit them.
"""

import os

os.environ.setdefault("DJANGO_SECRET_KEY", "test-only-insecure-secret-key-never-use-in-production")
os.environ.setdefault("PAYMENT_WEBHOOK_SECRET", "test-only-webhook-secret-never-use-in-production")
