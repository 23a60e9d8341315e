import datetime as dt

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from backoffice.sale_report import ProductNotFound, sale_report, write_png


class Command(BaseCommand):
    help = (
        "The report after a sale of one product: units sold, revenue, orders paid/expired/cancelled, time from the "
        "opening to sold out, peak orders per second, late payments and refunds to make; writes a PNG of units "
        "available and orders per second. From the stock ledger and the orders, on the audit's own snapshot."
    )

    def add_arguments(self, parser):
        parser.add_argument("--product", type=int, required=True, help="product id (the demo's flash sale: 101)")
        parser.add_argument(
            "--since",
            default=None,
            help="count orders created from this time on (ISO 8601; UTC when no offset is given); "
            "default: the product's sale_starts_at, else its first ledger row",
        )
        parser.add_argument(
            "--png", default=None, help="where to write the picture (default: sale-report-<product>.png)"
        )

    def handle(self, *args, product, since, png, **options):
        since_at = None
        if since is not None:
            since_at = parse_datetime(since)
            if since_at is None:
                raise CommandError(f"--since: not an ISO 8601 date and time: {since!r}")
            if timezone.is_naive(since_at):
                since_at = timezone.make_aware(since_at, dt.UTC)
        try:
            report = sale_report(product_id=product, since=since_at)
        except ProductNotFound:
            raise CommandError(f"no product {product}") from None
        out = self.stdout.write
        # Fail closed: no figure and no picture the audit of the same snapshot does not vouch for.
        if report.audit:
            for violation in report.audit:
                out(f"  AUDIT {violation}")
            raise CommandError(f"sale_report: the audit found {len(report.audit)} violation(s); figures not exact")
        if report.units_sold != report.units_sold_by_ledger:
            raise CommandError("sale_report: units sold by the orders and by the ledger differ")
        path = png or f"sale-report-{product}.png"
        write_png(report, path)
        out(f"sale report: {report.name} (#{report.product_id}, {report.sku})")
        ends = f", closes {report.sale_ends_at:%Y-%m-%d %H:%M:%S}" if report.sale_ends_at else ""
        out(
            f"  from:            {report.opening:%Y-%m-%d %H:%M:%S} UTC{ends} (database clock now {report.now:%H:%M:%S})"
        )
        out(f"  units sold:      {report.units_sold} (stock ledger: {report.units_sold_by_ledger} consumed)")
        revenue = ", ".join(f"{amount:.2f} {currency}" for currency, amount in sorted(report.revenue.items()))
        out(f"  revenue:         {revenue or 'none'}")
        out(
            f"  orders:          {report.orders} created: {report.paid} paid, {report.expired} expired, "
            f"{report.cancelled} cancelled, {report.pending} still pending"
        )
        if report.sold_out_at is not None:
            out(
                f"  sold out:        {report.seconds_to_sold_out:.1f} s after the opening ({report.sold_out_at:%H:%M:%S.%f})"
            )
        else:
            out(f"  sold out:        no ({report.available_now} available)")
        peak = f" at {report.peak_at:%H:%M:%S}" if report.peak_at else ""
        out(f"  peak:            {report.peak_orders_per_second} orders/s{peak}")
        out(f"  now:             {report.available_now} available, {report.reserved_now} held by unpaid orders")
        p = report.payments
        refunds = ", ".join(f"{amount:.2f} {currency}" for currency, amount in sorted(p["refund_amount"].items()))
        out(
            f"  late payments:   {p['late_payments']}; refunds to make: {p['refunds_to_make']} "
            f"totalling {refunds or 'nothing'}; amount or currency mismatches: {p['mismatches']}"
        )
        if p["to_reconcile"]:
            out(f"  to reconcile:    {p['to_reconcile']} expired without the gateway's word (reconcile_payments)")
        if p["unmatched"]:
            out(
                f"  unmatched money: {p['unmatched']} payment(s) for transactions this shop did not issue (reconcile_payments)"
            )
        out(f"  picture:         {path}")
        out("  audit:           clean (same snapshot)")
