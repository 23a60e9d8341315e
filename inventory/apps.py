from django.apps import AppConfig
from django.db.models.signals import post_migrate


class InventoryConfig(AppConfig):
    name = "inventory"
    verbose_name = "Inventory"

    def ready(self):
        from inventory.permissions import ops_groups_post_migrate

        post_migrate.connect(ops_groups_post_migrate, dispatch_uid="inventory.ops_groups")
