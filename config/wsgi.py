import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

application = get_wsgi_application()

from skincare.checks import run_startup_checks  # noqa: E402 - needs the apps loaded above

run_startup_checks()  # a configuration error stops the worker from booting instead of serving
