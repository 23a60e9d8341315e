from django.apps import AppConfig


class BackofficeConfig(AppConfig):
    """The back office, the top floor: the sale board, the sale report, the sale setup, the ops metrics, the
    sweeper loop and retention. It may import every app; no app imports it."""

    name = "backoffice"
    verbose_name = "Back office"
