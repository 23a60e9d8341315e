"""A reservation names the stock row (bucket) that holds its units.

Backfilled from the reserve ledger row of each reservation (``stock_movements`` with ``reason = 'reserve'``, which
names the bucket); a reservation without exactly one such row stops the migration (NOT NULL fails), rather than
being guessed into bucket 0.

The bucket must exist for the product. Not a FOREIGN KEY to ``stock_buckets (product_id, bucket)``: PostgreSQL checks
a foreign key with ``SELECT … FOR KEY SHARE`` of the referenced row, so every checkout would share-lock the hot
product's stock row while other checkouts update it (a MultiXact on the hottest row of a sale). Stock rows are never
deleted (a product's rows only gain units or lose them), so a plain read in a trigger is as strong as the key.
"""

from django.db import migrations, models

BACKFILL = """
UPDATE inventory_reservations r SET bucket = m.bucket
  FROM stock_movements m
 WHERE m.order_id = r.order_id AND m.product_id = r.product_id AND m.reason = 'reserve'
"""

BUCKET_EXISTS = """
CREATE FUNCTION inventory_reservations_bucket_exists() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM stock_buckets WHERE product_id = NEW.product_id AND bucket = NEW.bucket) THEN
        RAISE EXCEPTION 'product % has no stock row % (reservation of order %)', NEW.product_id, NEW.bucket,
            NEW.order_id USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER inventory_reservations_bucket_exists
    BEFORE INSERT OR UPDATE OF product_id, bucket ON inventory_reservations
    FOR EACH ROW EXECUTE FUNCTION inventory_reservations_bucket_exists();
"""

DROP_BUCKET_EXISTS = """
DROP TRIGGER inventory_reservations_bucket_exists ON inventory_reservations;
DROP FUNCTION inventory_reservations_bucket_exists();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("orders", "0002_orders_customer_pending_idx"),
        ("inventory", "0006_stock_buckets"),
    ]

    operations = [
        migrations.AddField(
            model_name="reservation",
            name="bucket",
            field=models.PositiveSmallIntegerField(null=True),
        ),
        migrations.RunSQL(BACKFILL, migrations.RunSQL.noop),
        migrations.AlterField(
            model_name="reservation",
            name="bucket",
            field=models.PositiveSmallIntegerField(),
        ),
        migrations.RunSQL(BUCKET_EXISTS, DROP_BUCKET_EXISTS),
    ]
