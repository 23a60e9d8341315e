import sys

from django.apps import AppConfig


class SkincareConfig(AppConfig):
    """The shared library: errors, database helpers, API plumbing, metrics, logging, customer API tokens, rate
    limits, and the ``<id:...>`` path converter every app's URLs use."""

    name = "skincare"
    verbose_name = "Skincare foundation"

    def ready(self) -> None:
        from django.urls import register_converter

        from skincare import (
            checks,  # registers the system checks; refuses a command in production (below)
            signals,  # noqa: F401 - connects the admin login throttle's receivers
        )
        from skincare.connections import connect_signals
        from skincare.validation import DatabaseIdConverter

        connect_signals()
        register_converter(DatabaseIdConverter, "id")
        # Production: a management command (manage.py, django-admin, python -m django) refuses here, before it runs.
        checks.refuse_in_production(sys.argv)
