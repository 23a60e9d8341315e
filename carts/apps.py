from django.apps import AppConfig


class CartsConfig(AppConfig):
    name = "carts"
    verbose_name = "Carts"

    def ready(self) -> None:
        from carts.services import carts_prune
        from skincare.retention import register_pruner

        register_pruner("carts", carts_prune)
