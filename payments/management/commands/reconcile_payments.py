"""``manage.py reconcile_payments [--since …]``: the orders with a gateway session, compared with the gateway's own
status (``payments.sessions.payments_reconcile``), and the unmatched payments ops have not resolved (money for a
transaction the shop did not issue). Prints every one; exit code 1 when there is any."""

from datetime import UTC, timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from payments.reporting import unmatched_payments_open
from payments.sessions import payments_reconcile


class Command(BaseCommand):
    help = (
        "Compare orders with the payment gateway's statuses: paid there and cancelled here (a refund to make), paid "
        "here and not settled there, amounts that differ, the gateway not answering; and money the gateway took for a "
        "transaction this shop did not issue (unmatched payments, until resolved in the admin). Exit code 1 when any."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--since",
            default=None,
            help="sessions opened since this ISO 8601 time (default: the last 7 days)",
        )

    def handle(self, *args, since=None, **options):
        if since is None:
            start = timezone.now() - timedelta(days=7)
        else:
            parsed = parse_datetime(since)
            if parsed is None:
                raise CommandError(f"--since must be an ISO 8601 time, not {since!r}")
            start = parsed if timezone.is_aware(parsed) else timezone.make_aware(parsed, UTC)
        mismatches = payments_reconcile(since=start)
        for mismatch in mismatches:
            self.stdout.write(f"order {mismatch.order_id}: {mismatch.kind}: {mismatch.detail}")
        unmatched = unmatched_payments_open()
        for _id, gateway, gateway_order_id, transaction_id, _status, amount, currency, received_at in unmatched:
            self.stdout.write(
                f"unmatched payment: {amount} {currency} for {gateway} transaction {gateway_order_id} "
                f"({transaction_id or 'no transaction id'}), received {received_at.isoformat()}: not issued here"
            )
        self.stdout.write(
            f"reconcile_payments: {len(mismatches)} mismatches since {start.isoformat()}, "
            f"{len(unmatched)} unmatched payments"
        )
        if mismatches or unmatched:
            raise SystemExit(1)
