"""Put the flash-sale product back to its opening state through the services, so the ledger stays consistent.

Cancels every pending order that holds the product (``ops_cancelled``: their reserved units go back to available
with a ledger row each, and each one's gateway transaction is closed like a customer's cancel), then counts the product's available stock to ``--stock`` (default 1) with
``stock_set_counted`` (reason note "flash sale setup"). Prints one line that the load tests parse: the highest
order id at the end of the setup, so "orders created for the product since the setup" needs no clock.

It also sets the sale window in the same run (``inventory.catalogue.product_sale_set``, docs/sale-windows.md):
``--starts-in SECONDS`` or ``--starts-at ISO8601``, ``--duration SECONDS`` or ``--ends-at ISO8601``, ``--price P``
(the sale price) and ``--max-per-customer K``. Relative times count from the database clock. Without window
options the product has no window (on sale at once, at its regular price, as before); without
``--max-per-customer`` its limit is left as it is. A second line prints the window as the database sees it.

``--buckets K`` spreads the stock over K stock rows (``inventory.services.stock_buckets_set``,
docs/strategies.md#stock-buckets); without it the product keeps its number of buckets.

``--queue`` (with ``--admit-per-second N``, default QUEUE_ADMIT_PER_SECOND) gives the product a fresh waiting room
(docs/queue.md): checkouts need an admission. Without it the product has no queue. A third line prints the queue.
"""

from argparse import ArgumentTypeError
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.db.models import Max

from backoffice.sale_setup import sale_queue_reset
from inventory import catalogue
from inventory import services as inventory_services
from inventory.exceptions import StaleStockVersion
from inventory.models import Inventory, Product
from inventory.selectors import SALE_STATE_SQL, SECONDS_TO_START_SQL
from orders import services as order_services
from orders.exceptions import OrderNotFound, OrderNotPending
from orders.models import Order, Reservation
from payments import sessions
from skincare.db import db_now
from skincare.errors import InvalidInput
from waitingroom import services as queue_services

FLASH_SALE_PRODUCT_ID = 101
NOTE = "flash sale setup"


class Command(BaseCommand):
    help = "Cancel the pending orders holding the flash-sale product and set its available stock to --stock."

    def add_arguments(self, parser):
        parser.add_argument("--stock", type=int, default=1, help="available stock to open the sale with (default 1)")
        parser.add_argument("--product", type=int, default=FLASH_SALE_PRODUCT_ID, help="product id (default 101)")
        starts = parser.add_mutually_exclusive_group()
        starts.add_argument(
            "--starts-in", type=float, metavar="SECONDS", help="open the sale SECONDS from now (DB clock)"
        )
        starts.add_argument("--starts-at", type=_iso_datetime, metavar="ISO8601", help="open the sale at this time")
        ends = parser.add_mutually_exclusive_group()
        ends.add_argument("--duration", type=float, metavar="SECONDS", help="close the sale SECONDS after it opens")
        ends.add_argument("--ends-at", type=_iso_datetime, metavar="ISO8601", help="close the sale at this time")
        parser.add_argument("--price", type=_price, metavar="P", help="the sale price (needs a window)")
        parser.add_argument(
            "--max-per-customer", type=int, metavar="K", help="most units one customer may hold (default: unchanged)"
        )
        parser.add_argument(
            "--buckets", type=int, metavar="K", help="spread the stock over K stock rows, 1-64 (default: unchanged)"
        )
        parser.add_argument("--queue", action="store_true", help="checkouts need an admission (docs/queue.md)")
        parser.add_argument("--admit-per-second", type=int, metavar="N", help="the queue's pace (needs --queue)")

    def handle(self, *args, stock, product, starts_in, starts_at, duration, ends_at, price, **options):
        _refuse_bad_options(stock=stock, starts_in=starts_in, duration=duration, **options)
        if not Inventory.objects.filter(product_id=product).exists():
            raise CommandError(f"product {product} has no stock row (run load_demo_data first)")
        # Relative times count from the database clock: the clock every checkout compares the window with.
        now = db_now()
        if starts_in is not None:
            starts_at = now + timedelta(seconds=starts_in)
        if duration is not None:
            ends_at = (starts_at or now) + timedelta(seconds=duration)
        max_per_customer = options["max_per_customer"]
        if max_per_customer is None:
            max_per_customer = Product.objects.values_list("max_per_customer", flat=True).get(pk=product)
        try:
            catalogue.product_sale_set(
                product_id=product,
                starts_at=starts_at,
                ends_at=ends_at,
                sale_price=price,
                max_per_customer=max_per_customer,
            )
        except InvalidInput as exc:
            raise CommandError(exc.message) from None
        # Before the stock: a product set up with a queue never sells for a moment without one.
        queue_line = sale_queue_reset(
            product_id=product, queued=options["queue"], admit_per_second=options["admit_per_second"]
        )
        cancelled = _cancel_pending_orders(product)
        inventory = _count_stock(product, stock)
        if options["buckets"] is not None:
            try:
                inventory = inventory_services.stock_buckets_set(product_id=product, buckets=options["buckets"])
            except InvalidInput as exc:
                raise CommandError(f"--buckets: {exc.message}") from None
        buckets = Product.objects.values_list("stock_buckets", flat=True).get(pk=product)
        max_order_id = Order.objects.aggregate(m=Max("pk"))["m"] or 0
        self.stdout.write(
            f"flash_sale_setup: product {product} available={inventory.available_stock} "
            f"reserved={inventory.reserved_stock} buckets={buckets}; {cancelled} pending orders cancelled (ops_cancelled); "
            f"max_order_id={max_order_id}"
        )
        self.stdout.write(_window_line(product))
        if queue_line is not None:
            self.stdout.write(queue_line)


def _refuse_bad_options(
    *, stock: int, starts_in: float | None, duration: float | None, queue: bool, admit_per_second: int | None, **_: Any
) -> None:
    if stock < 0:
        raise CommandError("--stock must not be negative")
    if admit_per_second is not None and not queue:
        raise CommandError("--admit-per-second needs --queue")
    if admit_per_second is not None:
        try:  # at least 1, and within the payment pages' pace (waitingroom.services.queue_pace_check)
            queue_services.queue_pace_check(admit_per_second=admit_per_second)
        except InvalidInput as exc:
            raise CommandError(f"--admit-per-second: {exc.message}") from None
    for name, seconds in (("--starts-in", starts_in), ("--duration", duration)):
        if seconds is not None and seconds < 0:
            raise CommandError(f"{name} must not be negative")


def _cancel_pending_orders(product_id: int) -> int:
    """Cancel (``ops_cancelled``) every pending order that holds the product, and close each one's gateway
    transaction like a customer's cancel; returns how many."""
    pending = list(
        Order.objects.filter(
            status=Order.Status.PENDING_PAYMENT,
            reservations__product_id=product_id,
            reservations__status=Reservation.Status.ACTIVE,
        )
        .distinct()
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    cancelled = 0
    for order_id in pending:
        try:
            order_services.order_cancel(order_id=order_id, reason=Order.CancelReason.OPS_CANCELLED)
            cancelled += 1
            sessions.session_close_after_cancel(order_id=order_id)  # committed: the gateway's page closes too
        except (OrderNotFound, OrderNotPending):
            pass  # paid, expired or cancelled meanwhile: it no longer holds stock
    return cancelled


def _count_stock(product_id: int, stock: int) -> Inventory:
    """Count the product's available stock to ``stock`` (``stock_set_counted``), reading its version again when a
    checkout moved the row in between (five tries)."""
    for _attempt in range(5):
        inventory = Inventory.objects.get(product_id=product_id)
        try:
            return inventory_services.stock_set_counted(
                product_id=product_id, counted=stock, expected_version=inventory.version, note=NOTE
            )
        except StaleStockVersion:
            continue  # a checkout moved the row between the read and the count: read it again
    raise CommandError(f"product {product_id}: stock kept changing; is a load test still running?")


def _iso_datetime(value: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ArgumentTypeError(f"not an ISO 8601 time: {value!r}") from None
    if parsed.tzinfo is None:
        raise ArgumentTypeError(f"give a UTC offset (e.g. 2026-12-01T12:00:00+07:00): {value!r}")
    return parsed


def _price(value: str) -> Decimal:
    try:
        price = Decimal(value)
    except InvalidOperation:
        raise ArgumentTypeError(f"not a price: {value!r}") from None
    if not price.is_finite() or price < 0 or price != price.quantize(Decimal("0.01")):
        raise ArgumentTypeError(f"a price is a non-negative amount with at most 2 decimals: {value!r}")
    return price


def _iso(moment: datetime | None) -> str:
    return "-" if moment is None else moment.isoformat()


def _window_line(product_id: int) -> str:
    """The product's window as the database sees it right now (one statement: its clock, its state)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT now(), p.sale_starts_at, p.sale_ends_at, p.sale_price, p.price, p.max_per_customer, "
            f"{SALE_STATE_SQL}, {SECONDS_TO_START_SQL} FROM products p WHERE p.id = %s",
            [product_id],
        )
        now, starts_at, ends_at, sale_price, price, limit, state, seconds_to_start = cursor.fetchone()
    if state is None:
        window = "no sale window (on sale now at the regular price)"
    else:
        window = f"sale {state}: starts_at={_iso(starts_at)} ends_at={_iso(ends_at)}"
        if seconds_to_start is not None:
            window += f" (opens in {seconds_to_start} s)"
    return (
        f"flash_sale_setup: database now={_iso(now)}; {window}; "
        f"price={sale_price if sale_price is not None else price} max_per_customer={limit if limit else '-'}"
    )
