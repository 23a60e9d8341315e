# Production-style image: gunicorn serving the API against an external PostgreSQL (DATABASE_URL).
FROM python:3.12-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
# Exactly the reviewed bytes: every package pinned with its hashes (docs/dependencies.md).
COPY requirements.lock .
RUN pip install --no-cache-dir --require-hashes -r requirements.lock
COPY . .
# Static files are collected at build time, without a database or real secrets: the only development-mode step.
RUN DJANGO_ENV=development DJANGO_READ_DOT_ENV_FILE=false DATABASE_URL=postgres://build@localhost/build \
    DJANGO_SECRET_KEY=build-only-not-a-secret python manage.py collectstatic --noinput -v0
# The image is production whatever is (not) set at run time: unset DJANGO_ENV is production anyway, and an unknown
# value refuses to start (config/modes.py). It runs as an unprivileged user that owns nothing it serves.
ENV DJANGO_ENV=production HOST=0.0.0.0 PORT=8000
RUN useradd --system --no-create-home --uid 10001 --shell /usr/sbin/nologin skincare
USER 10001:10001
EXPOSE 8000
CMD ["gunicorn", "-c", "config/gunicorn.conf.py", "config.wsgi:application"]
