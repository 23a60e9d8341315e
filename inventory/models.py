from django.conf import settings
from django.db import models
from django.db.models import F, Q


class InventoryStrategy(models.TextChoices):
    """How a checkout takes a product's units (docs/strategies.md). Every strategy ends with the same guarded
    ``UPDATE … WHERE available_stock >= qty``, so switching one in the middle of a sale is safe."""

    GUARDED_UPDATE = "guarded_update", "Guarded update (the UPDATE alone decides)"
    ROW_LOCK = "row_lock", "Row lock (FOR NO KEY UPDATE, waits its turn)"
    ROW_LOCK_NOWAIT = "row_lock_nowait", "Row lock, NOWAIT (busy row: 409 lock_busy at once)"
    OPTIMISTIC = "optimistic", "Optimistic (version check, bounded retries)"
    ADVISORY = "advisory", "Advisory lock per product (transaction-scoped)"
    SERIALIZABLE = "serializable", "SERIALIZABLE isolation, whole transaction retried"


class Product(models.Model):
    sku = models.CharField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    price = models.DecimalField(max_digits=12, decimal_places=2)
    is_active = models.BooleanField(default=True)
    inventory_strategy = models.CharField(
        max_length=20,
        choices=InventoryStrategy.choices,
        default=InventoryStrategy.GUARDED_UPDATE,
        db_default=InventoryStrategy.GUARDED_UPDATE,
        help_text="How checkouts take this product's units; see docs/strategies.md. Safe to change during a sale.",
    )
    # Units of this product one customer may hold in pending_payment and paid orders together; NULL = no limit.
    max_per_customer = models.PositiveIntegerField(
        null=True, blank=True, help_text="Most units one customer may hold (pending and paid orders); empty = no limit."
    )
    # A sale window (docs/sale-windows.md): checkouts before sale_starts_at get 409 sale_not_started, from
    # sale_ends_at on 410 sale_ended, inside it the unit price is sale_price (when set). Either end may be empty;
    # both empty = no window (always on sale). The database clock decides, never the client's or the web server's.
    sale_starts_at = models.DateTimeField(
        null=True, blank=True, help_text="Checkouts open at this time (database clock); empty = already open."
    )
    sale_ends_at = models.DateTimeField(
        null=True, blank=True, help_text="Checkouts close at this time (database clock); empty = never close."
    )
    sale_price = models.DecimalField(
        max_digits=12,
        decimal_places=2,
        null=True,
        blank=True,
        help_text="Unit price inside the sale window; empty = the regular price. Needs a window.",
    )
    # How many stock rows (buckets) the product's units are spread over (docs/strategies.md#stock-buckets): 1 = one
    # row, as the seed has it. A hot product's checkouts then claim a bucket with SKIP LOCKED instead of queueing on
    # one row. Changed only through inventory.services.stock_buckets_set (it moves the units).
    stock_buckets = models.PositiveSmallIntegerField(
        default=1,
        db_default=1,
        help_text="Stock rows the units are spread over (1-64); more rows let more checkouts of one product run at "
        "once. Only with the guarded_update strategy.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "products"
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(condition=Q(price__gte=0), name="products_price_gte_0"),
            models.CheckConstraint(
                condition=Q(stock_buckets__gte=1) & Q(stock_buckets__lte=64), name="products_stock_buckets_1_64"
            ),
            models.CheckConstraint(
                condition=Q(stock_buckets=1) | Q(inventory_strategy=InventoryStrategy.GUARDED_UPDATE),
                name="products_stock_buckets_need_guarded_update",
                violation_error_message="Stock buckets (more than 1) work with the guarded_update strategy only.",
            ),
            models.CheckConstraint(
                condition=Q(inventory_strategy__in=InventoryStrategy.values), name="products_inventory_strategy_valid"
            ),
            models.CheckConstraint(
                condition=Q(max_per_customer__isnull=True) | Q(max_per_customer__gte=1),
                name="products_max_per_customer_gte_1",
            ),
            models.CheckConstraint(
                condition=Q(sale_price__isnull=True) | Q(sale_price__gte=0), name="products_sale_price_gte_0"
            ),
            models.CheckConstraint(
                condition=Q(sale_starts_at__isnull=True)
                | Q(sale_ends_at__isnull=True)
                | Q(sale_ends_at__gt=F("sale_starts_at")),
                name="products_sale_window_ends_after_start",
                violation_error_message="The sale must end after it starts.",
            ),
            models.CheckConstraint(
                condition=Q(sale_price__isnull=True) | Q(sale_starts_at__isnull=False) | Q(sale_ends_at__isnull=False),
                name="products_sale_price_needs_window",
                violation_error_message="A sale price needs a sale window (a start, an end or both).",
            ),
        ]

    def __str__(self):
        return f"{self.name} ({self.sku})"


class Inventory(models.Model):
    """Stock totals of one product: a database VIEW summing the product's :class:`StockBucket` rows, so
    ``SELECT available_stock, reserved_stock FROM inventories WHERE product_id = …`` (the seed's read) is exact, with
    no row of its own for a checkout to queue on. ``available_stock`` can be claimed by new checkouts;
    ``reserved_stock`` is held by pending orders. ``version`` changes whenever any bucket changes. Read-only."""

    product = models.OneToOneField(Product, on_delete=models.DO_NOTHING, primary_key=True, related_name="inventory")
    available_stock = models.IntegerField()
    reserved_stock = models.IntegerField()
    version = models.BigIntegerField()
    updated_at = models.DateTimeField()

    class Meta:
        managed = False  # the view is created by migration inventory.0006
        db_table = "inventories"
        verbose_name_plural = "inventories"
        ordering = ["product_id"]
        permissions = [("adjust_stock", "Can adjust and count stock")]

    def __str__(self):
        return f"stock of product {self.product_id}: {self.available_stock} available, {self.reserved_stock} reserved"


class StockBucket(models.Model):
    """One stock row of a product: bucket 0 always exists; a product with ``stock_buckets`` = K sells from buckets
    0..K-1 (rows at K or above, left by lowering K, only hold reservations until they end and units that the next
    full pass moves). Written only by ``inventory.reserve``, ``inventory.services`` and ``inventory.catalogue``."""

    # no index of its own: the unique (product, bucket) leads with it (one index less per non-HOT update)
    product = models.ForeignKey(Product, on_delete=models.PROTECT, related_name="buckets", db_index=False)
    bucket = models.PositiveSmallIntegerField()
    available_stock = models.IntegerField(default=0)
    reserved_stock = models.IntegerField(default=0)
    version = models.BigIntegerField(default=1)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "stock_buckets"
        ordering = ["product_id", "bucket"]
        constraints = [
            models.UniqueConstraint(fields=["product", "bucket"], name="stock_buckets_product_bucket_uniq"),
            models.CheckConstraint(condition=Q(available_stock__gte=0), name="stock_buckets_available_stock_gte_0"),
            models.CheckConstraint(condition=Q(reserved_stock__gte=0), name="stock_buckets_reserved_stock_gte_0"),
        ]

    def __str__(self):
        return f"bucket {self.bucket} of product {self.product_id}: {self.available_stock} available"


class StockMovement(models.Model):
    """Append-only ledger: one row for every change to a product's stock counters, written in the same
    transaction as the change. A database trigger rejects UPDATE and DELETE."""

    class Reason(models.TextChoices):
        RESERVE = "reserve", "Reserved by checkout"
        CONSUME = "consume", "Consumed by payment"
        EXPIRE = "expire", "Reservation expired"
        CANCEL = "cancel", "Reservation cancelled"
        RESTOCK = "restock", "Initial stock / restock"
        ADJUSTMENT = "adjustment", "Manual adjustment"
        COUNT = "count", "Stock count"
        REBALANCE = "rebalance", "Moved between stock buckets"

    # no index of its own: stock_movements_product_idx (product, id) leads with it (one write less per checkout)
    product = models.ForeignKey(Product, on_delete=models.PROTECT, related_name="stock_movements", db_index=False)
    # The stock row (StockBucket.bucket) the units moved in; a reserve row also says where its reservation is held.
    bucket = models.PositiveSmallIntegerField(default=0, db_default=0)
    available_delta = models.IntegerField()
    reserved_delta = models.IntegerField()
    reason = models.CharField(max_length=20, choices=Reason.choices)
    # A plain column, not a foreign key: the ledger belongs to inventory, which must not depend on orders.
    order_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    note = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "stock_movements"
        ordering = ["-id"]
        indexes = [models.Index(fields=["product", "id"], name="stock_movements_product_idx")]
        constraints = [
            models.CheckConstraint(
                condition=~Q(available_delta=0) | ~Q(reserved_delta=0), name="stock_movements_nonzero"
            ),
            models.CheckConstraint(
                condition=Q(
                    reason__in=["reserve", "consume", "expire", "cancel", "restock", "adjustment", "count", "rebalance"]
                ),
                name="stock_movements_reason",
            ),
        ]

    def __str__(self):
        return f"{self.reason} product {self.product_id}: available {self.available_delta:+d}, reserved {self.reserved_delta:+d}"
