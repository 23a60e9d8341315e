"""Project wiring: settings, the root URLconf, the WSGI entry point and gunicorn's configuration. It may import every
app; nothing imports it."""
