"""Stock buckets (issue 17): a product's units live in one or more ``stock_buckets`` rows, and ``inventories``
becomes a view of their sums, so the seed's ``SELECT … FROM inventories`` stays exact with no hot row of its own.

Every existing inventory row becomes bucket 0 of its product, with the same counters and version."""

import django.db.models.deletion
from django.db import migrations, models

TO_BUCKETS = """
INSERT INTO stock_buckets (product_id, bucket, available_stock, reserved_stock, version, updated_at)
SELECT product_id, 0, available_stock, reserved_stock, version, updated_at FROM inventories;
DROP TABLE inventories;
CREATE VIEW inventories AS
SELECT product_id,
       sum(available_stock)::integer AS available_stock,
       sum(reserved_stock)::integer AS reserved_stock,
       sum(version)::bigint AS version,
       max(updated_at) AS updated_at,
       count(*)::integer AS bucket_rows
  FROM stock_buckets
 GROUP BY product_id;
"""

BACK_TO_ONE_ROW = """
DROP VIEW inventories;
CREATE TABLE inventories (
    product_id bigint PRIMARY KEY REFERENCES products (id) DEFERRABLE INITIALLY DEFERRED,
    available_stock integer NOT NULL CONSTRAINT inventories_available_stock_gte_0 CHECK (available_stock >= 0),
    reserved_stock integer NOT NULL CONSTRAINT inventories_reserved_stock_gte_0 CHECK (reserved_stock >= 0),
    version bigint NOT NULL,
    updated_at timestamptz NOT NULL
);
INSERT INTO inventories (product_id, available_stock, reserved_stock, version, updated_at)
SELECT product_id, sum(available_stock), sum(reserved_stock), sum(version), max(updated_at)
  FROM stock_buckets GROUP BY product_id;
DELETE FROM stock_buckets;
"""


class Migration(migrations.Migration):
    dependencies = [("inventory", "0005_product_sale_window")]

    operations = [
        migrations.CreateModel(
            name="StockBucket",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("bucket", models.PositiveSmallIntegerField()),
                ("available_stock", models.IntegerField(default=0)),
                ("reserved_stock", models.IntegerField(default=0)),
                ("version", models.BigIntegerField(default=1)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "product",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT, related_name="buckets", to="inventory.product"
                    ),
                ),
            ],
            options={
                "db_table": "stock_buckets",
                "ordering": ["product_id", "bucket"],
                "constraints": [
                    models.UniqueConstraint(fields=("product", "bucket"), name="stock_buckets_product_bucket_uniq"),
                    models.CheckConstraint(
                        condition=models.Q(("available_stock__gte", 0)), name="stock_buckets_available_stock_gte_0"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("reserved_stock__gte", 0)), name="stock_buckets_reserved_stock_gte_0"
                    ),
                ],
            },
        ),
        migrations.AddField(
            model_name="product",
            name="stock_buckets",
            field=models.PositiveSmallIntegerField(
                db_default=1,
                default=1,
                help_text="Stock rows the units are spread over (1-64); more rows let more checkouts of one product "
                "run at once. Only with the guarded_update strategy.",
            ),
        ),
        migrations.AddConstraint(
            model_name="product",
            constraint=models.CheckConstraint(
                condition=models.Q(("stock_buckets__gte", 1), ("stock_buckets__lte", 64)),
                name="products_stock_buckets_1_64",
            ),
        ),
        migrations.AddConstraint(
            model_name="product",
            constraint=models.CheckConstraint(
                condition=models.Q(("stock_buckets", 1), ("inventory_strategy", "guarded_update"), _connector="OR"),
                name="products_stock_buckets_need_guarded_update",
                violation_error_message="Stock buckets (more than 1) work with the guarded_update strategy only.",
            ),
        ),
        migrations.AddField(
            model_name="stockmovement",
            name="bucket",
            field=models.PositiveSmallIntegerField(db_default=0, default=0),
        ),
        migrations.RemoveConstraint(model_name="stockmovement", name="stock_movements_reason"),
        migrations.AddConstraint(
            model_name="stockmovement",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "reason__in",
                        ["reserve", "consume", "expire", "cancel", "restock", "adjustment", "count", "rebalance"],
                    )
                ),
                name="stock_movements_reason",
            ),
        ),
        migrations.AlterField(
            model_name="stockmovement",
            name="reason",
            field=models.CharField(
                choices=[
                    ("reserve", "Reserved by checkout"),
                    ("consume", "Consumed by payment"),
                    ("expire", "Reservation expired"),
                    ("cancel", "Reservation cancelled"),
                    ("restock", "Initial stock / restock"),
                    ("adjustment", "Manual adjustment"),
                    ("count", "Stock count"),
                    ("rebalance", "Moved between stock buckets"),
                ],
                max_length=20,
            ),
        ),
        migrations.RunSQL(TO_BUCKETS, BACK_TO_ONE_ROW),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveConstraint(model_name="inventory", name="inventories_available_stock_gte_0"),
                migrations.RemoveConstraint(model_name="inventory", name="inventories_reserved_stock_gte_0"),
                migrations.AlterModelOptions(
                    name="inventory",
                    options={
                        "managed": False,
                        "ordering": ["product_id"],
                        "permissions": [("adjust_stock", "Can adjust and count stock")],
                        "verbose_name_plural": "inventories",
                    },
                ),
            ],
        ),
    ]
