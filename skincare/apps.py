from django.apps import AppConfig


class SkincareConfig(AppConfig):
    """The foundation: settings, errors, database helpers, API plumbing, metrics, logging, customer API tokens."""

    name = "skincare"
    verbose_name = "Skincare foundation"

    def ready(self) -> None:
        from skincare import signals  # noqa: F401 - connects the admin login throttle's receivers
