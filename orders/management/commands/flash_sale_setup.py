"""Put the flash-sale product back to its opening state through the services, so the ledger stays consistent.

Cancels every pending order that holds the product (``ops_cancelled``: their reserved units go back to available
with a ledger row each), then counts the product's available stock to ``--stock`` (default 1) with
``stock_set_counted`` (reason note "flash sale setup"). Prints one line that the load tests parse: the highest
order id at the end of the setup, so "orders created for the product since the setup" needs no clock.
"""

from django.core.management.base import BaseCommand, CommandError
from django.db.models import Max

from inventory import services as inventory_services
from inventory.exceptions import StaleStockVersion
from inventory.models import Inventory
from orders import services as order_services
from orders.exceptions import OrderNotFound, OrderNotPending
from orders.models import Order, Reservation

FLASH_SALE_PRODUCT_ID = 101
NOTE = "flash sale setup"


class Command(BaseCommand):
    help = "Cancel the pending orders holding the flash-sale product and set its available stock to --stock."

    def add_arguments(self, parser):
        parser.add_argument("--stock", type=int, default=1, help="available stock to open the sale with (default 1)")
        parser.add_argument("--product", type=int, default=FLASH_SALE_PRODUCT_ID, help="product id (default 101)")

    def handle(self, *args, stock, product, **options):
        if stock < 0:
            raise CommandError("--stock must not be negative")
        if not Inventory.objects.filter(product_id=product).exists():
            raise CommandError(f"product {product} has no inventory row (run load_demo_data first)")
        pending = list(
            Order.objects.filter(
                status=Order.Status.PENDING_PAYMENT,
                reservations__product_id=product,
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
            except (OrderNotFound, OrderNotPending):
                pass  # paid, expired or cancelled meanwhile: it no longer holds stock
        for _attempt in range(5):
            inventory = Inventory.objects.get(product_id=product)
            try:
                inventory = inventory_services.stock_set_counted(
                    product_id=product, counted=stock, expected_version=inventory.version, note=NOTE
                )
                break
            except StaleStockVersion:
                continue  # a checkout moved the row between the read and the count: read it again
        else:
            raise CommandError(f"product {product}: stock kept changing; is a load test still running?")
        max_order_id = Order.objects.aggregate(m=Max("pk"))["m"] or 0
        self.stdout.write(
            f"flash_sale_setup: product {product} available={inventory.available_stock} "
            f"reserved={inventory.reserved_stock}; {cancelled} pending orders cancelled (ops_cancelled); "
            f"max_order_id={max_order_id}"
        )
