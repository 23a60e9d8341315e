from django.apps import AppConfig


class SkincareConfig(AppConfig):
    """The foundation: settings, errors, database helpers, API plumbing, and customer API tokens (commands)."""

    name = "skincare"
    verbose_name = "Skincare foundation"
