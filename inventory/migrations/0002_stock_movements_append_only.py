from django.db import migrations

FORWARD = """
CREATE FUNCTION stock_movements_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'stock_movements is append-only: % is not allowed', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;

CREATE TRIGGER stock_movements_no_update_delete
BEFORE UPDATE OR DELETE ON stock_movements
FOR EACH ROW EXECUTE FUNCTION stock_movements_append_only();
"""

BACKWARD = """
DROP TRIGGER IF EXISTS stock_movements_no_update_delete ON stock_movements;
DROP FUNCTION IF EXISTS stock_movements_append_only();
"""


class Migration(migrations.Migration):
    """The ledger is append-only in the database itself, whatever code (or person with psql) writes to it.
    TRUNCATE stays possible on purpose: it is what a test database flush uses, and it needs table-owner
    rights that application code should not have in production."""

    dependencies = [("inventory", "0001_initial")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
