"""The checkout's statements run their generic plan (skincare.db.generic_plans): prepared once per connection,
planned once. PostgreSQL's default would plan the quote read and ORDER_SQL again on every call; the control shows
it, with the one line that asks for generic plans taken out."""

import pytest
from django.conf import settings
from django.db import connection

from checkout import services as checkout_module
from checkout.testing import place as checkout

RUNS = 10  # DB_PREPARE_THRESHOLD (5) runs unprepared, then prepared ones


def _plans() -> dict[str, tuple[int, int]]:
    """Each prepared statement of this connection: (generic plans, custom plans) PostgreSQL made for it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
        return {statement: (generic, custom) for statement, generic, custom in cursor.fetchall()}


def _of(plans: dict[str, tuple[int, int]], marker: str) -> tuple[int, int]:
    found = [counts for statement, counts in plans.items() if marker in statement]
    assert len(found) == 1, (marker, list(plans))
    return found[0]


def _plan_cache_mode() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW plan_cache_mode")
        return cursor.fetchone()[0]


def _checkouts(make_product, make_customer) -> None:
    product = make_product(stock=RUNS)
    for _ in range(RUNS):
        checkout(customer=make_customer(), items=[(product.pk, 1)])


@pytest.mark.django_db(transaction=True)
def test_the_checkout_statements_are_planned_once(make_product, make_customer) -> None:
    assert _plan_cache_mode() == "auto"
    _checkouts(make_product, make_customer)
    # transaction-local: the connection's other statements keep PostgreSQL's default
    assert _plan_cache_mode() == "auto"
    plans = _plans()
    if not settings.DB_PREPARED_STATEMENTS:  # nothing prepared, nothing to reuse: the statement is not sent
        assert plans == {}
        return
    assert _of(plans, "INSERT INTO orders")[1] == 0  # ORDER_SQL: never planned again
    assert _of(plans, "pg_advisory_xact_lock")[1] == 0  # QUOTES_SQL
    assert _of(plans, "INSERT INTO orders")[0] >= RUNS - settings.DB_PREPARE_THRESHOLD - 1
    assert _of(plans, "pg_advisory_xact_lock")[0] >= RUNS - settings.DB_PREPARE_THRESHOLD - 1


@pytest.mark.django_db(transaction=True)
def test_control_without_generic_plans_postgresql_plans_every_call(
    make_product, make_customer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same checkouts with the generic_plans() step removed: every prepared run of ORDER_SQL and of the quote
    read is a custom plan, made afresh."""
    if not settings.DB_PREPARED_STATEMENTS:
        pytest.fail("the control needs server-side prepared statements (DB_PREPARED_STATEMENTS=true)")
    monkeypatch.setattr(checkout_module, "generic_plans", lambda: None)
    _checkouts(make_product, make_customer)
    plans = _plans()
    order_generic, order_custom = _of(plans, "INSERT INTO orders")
    quote_generic, quote_custom = _of(plans, "pg_advisory_xact_lock")
    assert (order_generic, quote_generic) == (0, 0)
    assert min(order_custom, quote_custom) >= RUNS - settings.DB_PREPARE_THRESHOLD - 1
