# Production-style image: gunicorn serving the API against an external PostgreSQL (DATABASE_URL).
FROM python:3.12-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
RUN DATABASE_URL=postgres://build@localhost/build DJANGO_SECRET_KEY=build-only-not-a-secret python manage.py collectstatic --noinput -v0
ENV HOST=0.0.0.0 PORT=8000
EXPOSE 8000
CMD ["gunicorn", "-c", "skincare/gunicorn.conf.py", "skincare.wsgi:application"]
