from django.core.management.base import BaseCommand, CommandError

from orders.audit import CHECKS, DESCRIPTIONS, audit_inventory


class Command(BaseCommand):
    help = (
        "Check stock counters, reservations, orders and the stock ledger against each other. Exits 1 on any violation."
    )

    def handle(self, *args, **options):
        violations = audit_inventory()
        by_check = {name: [v for v in violations if v.check == name] for name in CHECKS}
        for name, found in by_check.items():
            mark = "ok  " if not found else "FAIL"
            self.stdout.write(f"{mark} {DESCRIPTIONS[name]}" + (f" ({len(found)} violations)" if found else ""))
            for violation in found:
                self.stdout.write(f"       {violation}")
        if violations:
            raise CommandError(f"audit_inventory: {len(violations)} violation(s)")
        self.stdout.write("audit_inventory: all checks passed")
