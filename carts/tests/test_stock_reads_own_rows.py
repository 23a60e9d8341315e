"""Every read of a product's stock reads that product's own stock rows, never every product's: a join with the
``inventories`` view (the stock rows' sums) makes PostgreSQL sum every product's rows on every request (HashAggregate
over a scan of ``stock_buckets``); ``inventory.selectors.STOCK_SUM_SQL``'s LATERAL join reads one product's rows.

Each statement that reads stock per request runs under ``EXPLAIN ANALYZE`` for one product among many; the stock
rows its plan reads (rows returned + rows a filter removed, times loops) must be that product's. The planner is
asked for index paths (``enable_seqscan = off``): on a test database this small a sequential scan of three pages is
its cheapest plan for any shape, and what is checked is that the statement's shape allows reading one product's
rows at all: a join with the aggregating view does not, whatever the planner is told (the control)."""

import json
from decimal import Decimal

import pytest
from django.db import connection, transaction

from carts.selectors import _CART_SQL
from checkout.services import QUOTES_SQL
from inventory.models import Product, StockBucket
from inventory.selectors import _PRODUCTS_SQL

OTHERS = 300
BUCKETS = 4  # the product read has several stock rows: the sum over its own rows is read, and only those


def _stock_rows_read(sql: str, params: object) -> int:
    """Stock rows the plan of ``sql`` read (returned by a scan of stock_buckets plus removed by its filters)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        (plan,) = cursor.fetchone()
    plan = json.loads(plan) if isinstance(plan, str) else plan

    def walk(node: dict) -> int:
        read = 0
        if node.get("Relation Name") == "stock_buckets":
            per_loop = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
            read += round(per_loop * node["Actual Loops"])
        return read + sum(walk(child) for child in node.get("Plans", []))

    return walk(plan[0]["Plan"])


@pytest.fixture
def product(make_product):
    """One product with BUCKETS stock rows after OTHERS products with one stock row each (the highest id: a plan
    that walks the rows in product order reads all of the others' first), the statistics fresh."""
    others = Product.objects.bulk_create(
        Product(sku=f"plan-{i}", name=f"Plan product {i}", price=Decimal("1.00"), inventory_strategy="guarded_update")
        for i in range(OTHERS)
    )
    StockBucket.objects.bulk_create(StockBucket(product=p, bucket=0, available_stock=5) for p in others)
    target = make_product(stock=40, buckets=BUCKETS)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE products")
        cursor.execute("ANALYZE stock_buckets")
    assert StockBucket.objects.filter(product=target).count() == BUCKETS
    return target


@pytest.mark.django_db
def test_the_checkouts_quote_read_reads_only_the_products_stock_rows(product) -> None:
    params = {"customer_lock": 42, "product_ids": [product.pk]}

    assert _stock_rows_read(QUOTES_SQL, params) == BUCKETS


@pytest.mark.django_db
def test_the_product_read_reads_only_the_products_stock_rows(product) -> None:
    assert _stock_rows_read(_PRODUCTS_SQL + " AND p.id = %s", [product.pk]) == BUCKETS


@pytest.mark.django_db
def test_the_cart_read_reads_only_its_products_stock_rows(product, make_customer) -> None:
    from carts import services

    customer = make_customer()
    cart = services.cart_create(customer=customer, items=[(product.pk, 1)])

    assert _stock_rows_read(_CART_SQL, [cart.cart_id, customer.pk]) == BUCKETS


@pytest.mark.django_db
def test_control_a_join_with_the_inventories_view_reads_every_products_rows(product) -> None:
    # The quote read as the stock-bucket merge left it: joined with the view that sums every product's rows.
    before_the_fix = QUOTES_SQL.replace(
        QUOTES_SQL[
            QUOTES_SQL.index("LEFT JOIN LATERAL") : QUOTES_SQL.index(") stock ON true") + len(") stock ON true")
        ],
        "LEFT JOIN (SELECT product_id, available_stock, version AS version_sum, bucket_rows AS stock_rows "
        "FROM inventories) stock ON stock.product_id = p.id",
    )
    assert "inventories" in before_the_fix and "LATERAL" not in before_the_fix

    read = _stock_rows_read(before_the_fix, {"customer_lock": 42, "product_ids": [product.pk]})

    assert read >= OTHERS + BUCKETS
