from typing import Any

from django.core.management.base import BaseCommand

from skincare import services


class Command(BaseCommand):
    help = (
        "Make the published demo accounts of load_demo_data unusable (deactivates demo-ops and demo-customer, deletes "
        "the demo token; orders and products stay). Production refuses to start until this is done (skincare.E003)."
    )
    # This is the way out of that refusal, so it runs without the system checks (manage.py lets it through too).
    requires_system_checks: list[str] = []

    def handle(self, *args: Any, **options: Any) -> None:
        changed = services.demo_accounts_disable()
        self.stdout.write("; ".join(changed) if changed else "no demo accounts")
