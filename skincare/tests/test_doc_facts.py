"""Claims of the docs that a reader acts on, held against the code they describe: the ledger's reasons, the waiting
room's place in the dependency map, the product API's fields, the memories a web process keeps, and the lock order of
a multi-product order."""

import re
from pathlib import Path

import pytest
from django.conf import settings

from inventory.models import StockMovement
from skincare.tests.test_dependencies import ALLOWED

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_ledger_table_names_every_reason_the_ledger_can_hold():
    text = (DOCS / "operations.md").read_text()
    table = text[text.index("| Reason ") : text.index("Summing a product's rows")]
    named = set(re.findall(r"^\| `([a-z_]+)`", table, re.M))
    assert named == set(StockMovement.Reason.values)


def test_the_waiting_rooms_place_in_the_layers_is_the_dependency_maps():
    text = (DOCS / "queue.md").read_text()
    assert "it imports only inventory and skincare, and payments" in text
    assert ALLOWED["waitingroom"] == frozenset({"inventory", "skincare"})
    assert "waitingroom" in ALLOWED["payments"]


@pytest.mark.django_db
def test_the_public_product_api_does_not_show_the_strategy_or_the_buckets(client, make_product):
    assert "public product API does not show it" in (DOCS / "strategies.md").read_text()
    body = client.get(f"/v1/products/{make_product().pk}").json()
    assert "inventory_strategy" not in body and "stock_buckets" not in body


def test_every_memory_a_web_process_keeps_is_named_with_its_bound():
    """operations.md lists the per-process memories by the setting that bounds each; every such setting exists."""
    text = (DOCS / "operations.md").read_text()
    start = text.index("**Web instances keep nothing that must outlive them**")
    paragraph = text[start : text.index("Put as many as you like", start)]
    bounds = re.findall(r"`([A-Z_]+)`", paragraph)
    assert bounds == [
        "SOLD_OUT_CACHE_MS",
        "API_TOKEN_CACHE_SECONDS",
        "QUEUE_COUNTERS_MAX_AGE_SECONDS",
        "PRODUCT_READ_MAX_AGE_SECONDS",
        "GATEWAY_BREAKER_SECONDS",
    ]
    assert all(hasattr(settings, name) for name in bounds)


def test_the_lock_order_of_a_multi_product_order_depends_on_its_stock_rows():
    """locking.md and strategies.md say what stock_reserve does (by its plan, ``inventory.plan``): one-row products
    locked together first, an order with a bucketed product product by product."""
    from inventory.plan import LockRows, ReserveLine, plan_reservation

    one_row = plan_reservation([ReserveLine(2, 1, "row_lock"), ReserveLine(1, 1, "guarded_update")]).steps
    assert isinstance(one_row[0], LockRows) and one_row[0].product_ids == (1, 2)
    assert not any(isinstance(step, LockRows) for step in one_row[1:])  # before any update
    mixed = [ReserveLine(3, 1, "row_lock"), ReserveLine(2, 1, bucket_count=4, stock_rows=4), ReserveLine(1, 1)]
    steps = plan_reservation(mixed).steps
    assert [step.line.product_id for step in steps if not isinstance(step, LockRows)] == [1, 2, 3]
    assert [step.product_ids for step in steps if isinstance(step, LockRows)] == [(3,)]  # its own, right before
    assert isinstance(steps[-2], LockRows)
    locking = (DOCS / "locking.md").read_text()
    assert "whose products each have one stock row locks those rows in one ascending" in locking
    assert "an order with a bucketed product\ntakes its products one by one" in locking
    assert "An order with a bucketed product takes step 1" in (DOCS / "strategies.md").read_text()
