#!/bin/sh
# The web container: migrate, load the labelled demo data only when LOAD_DEMO_DATA=true, then serve with gunicorn.
set -eu
python manage.py migrate --noinput
if [ "${LOAD_DEMO_DATA:-false}" = "true" ]; then
    python manage.py load_demo_data
fi
exec gunicorn -c config/gunicorn.conf.py config.wsgi:application
