from django.apps import AppConfig


class WaitingroomConfig(AppConfig):
    name = "waitingroom"
    verbose_name = "Waiting room"
