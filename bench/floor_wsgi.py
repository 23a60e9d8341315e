"""The WSGI application of the framework's floor (bench.floor), served by gunicorn with the service's configuration
file. Always bench.floor_settings, whatever the environment names."""

import os

from django.core.wsgi import get_wsgi_application

os.environ["DJANGO_SETTINGS_MODULE"] = "bench.floor_settings"

application = get_wsgi_application()
