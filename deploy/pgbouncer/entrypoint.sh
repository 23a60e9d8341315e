#!/bin/sh
# Writes PgBouncer's auth file from POSTGRES_USER / POSTGRES_PASSWORD (given by the environment, never stored in the
# image or in docker-compose.yml), then runs pgbouncer in the foreground.
set -eu
: "${POSTGRES_USER:?POSTGRES_USER is required}"
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}"
umask 077
printf '"%s" "%s"\n' "$POSTGRES_USER" "$POSTGRES_PASSWORD" > /run/pgbouncer/userlist.txt
exec pgbouncer /etc/pgbouncer/pgbouncer.ini
