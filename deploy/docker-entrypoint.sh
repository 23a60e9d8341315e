#!/bin/sh
# The web container: migrate, load the labelled demo data only when LOAD_DEMO_DATA=true, then serve with gunicorn.
set -eu
# migrate on the database itself, not through PgBouncer (it refuses the pooler); it also sets the role's lock and
# statement timeouts in the database, which bound every pooled statement (the start-up check skincare.E014).
DATABASE_URL="${MIGRATE_DATABASE_URL:?MIGRATE_DATABASE_URL is required}" DB_PGBOUNCER=false python manage.py migrate --noinput
if [ "${LOAD_DEMO_DATA:-false}" = "true" ]; then
    python manage.py load_demo_data
fi
exec gunicorn -c config/gunicorn.conf.py config.wsgi:application
