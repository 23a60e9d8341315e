from typing import Any

from django.core.management.base import BaseCommand

from backoffice.retention import retention_prune


class Command(BaseCommand):
    help = (
        "Delete rows past their retention window: idempotency keys (IDEMPOTENCY_KEY_TTL_SECONDS), processed webhook "
        "events (PROCESSED_EVENTS_RETENTION_DAYS), stale rate-limit counters, expired and checked-out carts "
        "(CART_RETENTION_SECONDS). The sweeper loop runs it too."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        results = retention_prune()
        self.stdout.write("prune_retention: " + ", ".join(f"{name} {count} deleted" for name, count in results.items()))
