"""Server-side prepared statements (DB_PREPARED_STATEMENTS, config/settings.py): on by default on a direct
connection, off behind PgBouncer, and the one wrong combination refuses to start. `make test` runs the race,
strategy and fault suites once more with them off, so both ways of binding parameters are covered."""

import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.conf import settings
from django.db import connection, connections

from checkout.testing import place as checkout
from devtools.testing import assert_invariants, make_overdue
from inventory.exceptions import InvalidProduct, SaleNotStarted, StockConflict
from inventory.models import Inventory, InventoryStrategy, StockMovement
from inventory.tests.test_sale_window import set_window
from orders.audit import audit_inventory
from orders.exceptions import PurchaseLimitExceeded, TooManyPendingOrders
from orders.models import Order, OrderLine, Reservation
from orders.services import order_cancel, orders_expire_due
from payments.models import PaymentAttempt
from skincare import db as skincare_db

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = ROOT / "config" / "settings.py"


def _settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> dict[str, Any]:
    """The settings module evaluated afresh with ``env`` on top of the test environment (unset: the default)."""
    for name in ("DB_PGBOUNCER", "DB_PREPARED_STATEMENTS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(SETTINGS))


def test_direct_connections_prepare_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    options = _settings(monkeypatch)["DATABASES"]["default"]["OPTIONS"]
    assert options["server_side_binding"] is True
    assert options["prepare_threshold"] == 5


@pytest.mark.parametrize("env", [{"DB_PGBOUNCER": "true"}, {"DB_PREPARED_STATEMENTS": "false"}])
def test_behind_pgbouncer_or_switched_off_nothing_is_prepared(monkeypatch: pytest.MonkeyPatch, env: dict) -> None:
    values = _settings(monkeypatch, **env)
    options = values["DATABASES"]["default"]["OPTIONS"]
    assert values["DB_PREPARED_STATEMENTS"] is False
    # Django's defaults: client-side binding, and prepare_threshold None (psycopg never prepares)
    assert "server_side_binding" not in options
    assert "prepare_threshold" not in options


@pytest.mark.parametrize("value", ["yes", "1", "on", "tru"])
def test_an_unknown_value_is_refused(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    with pytest.raises(Exception, match="DB_PREPARED_STATEMENTS must be true or false"):
        _settings(monkeypatch, DB_PREPARED_STATEMENTS=value)


def _test_database_url() -> str:
    """The test database's URL (migrated by this project's migrate: it has the role's timeouts a pooled process
    checks at start-up, skincare.E014)."""
    db = connection.settings_dict
    host = str(db.get("HOST") or "127.0.0.1")
    where = (
        f"/{db['NAME']}?host={quote(host)}"
        if host.startswith("/")
        else f"{quote(host)}:{db.get('PORT') or 5432}/{db['NAME']}"
    )
    password = f":{quote(str(db['PASSWORD']))}" if db.get("PASSWORD") else ""
    return f"postgres://{quote(str(db.get('USER') or 'postgres'))}{password}@{where}"


@pytest.mark.django_db
def test_prepared_statements_behind_pgbouncer_refuse_to_start() -> None:
    """The real start-up (manage.py check in a fresh process) refuses the combination PgBouncer 1.18 cannot serve."""
    env = {**os.environ, "DB_PGBOUNCER": "true", "DB_PREPARED_STATEMENTS": "true", "DATABASE_URL": _test_database_url()}
    result = subprocess.run(  # our own manage.py
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert "DB_PREPARED_STATEMENTS=true with DB_PGBOUNCER=true" in result.stderr
    control = subprocess.run(  # the same start-up, prepared statements off
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env={**env, "DB_PREPARED_STATEMENTS": "false"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert control.returncode == 0, control.stderr


def _prepared() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.django_db
def test_the_checkout_and_sweeper_statements_are_prepared_in_this_mode(make_product, make_customer) -> None:
    """Run in both modes by `make test`: with DB_PREPARED_STATEMENTS on, the checkout's quote read (the sold-out
    path's one statement too), its order insert and reservation, and the sweeper's claim are prepared on the
    connection after DB_PREPARE_THRESHOLD runs; off, nothing is."""
    product = make_product(stock=20)
    runs = settings.DB_PREPARE_THRESHOLD + 1
    orders = [checkout(customer=make_customer(), items=[(product.pk, 1)]) for _ in range(runs)]
    for order in Order.objects.filter(pk__in=[o.order_id for o in orders]):
        make_overdue(order)
    for _ in range(runs):
        assert orders_expire_due(batch_size=1).orders == 1
    statements = _prepared()
    if not settings.DB_PREPARED_STATEMENTS:
        assert statements == []
        return
    assert any("UPDATE stock_buckets" in s and "::smallint AS bucket" in s for s in statements), (
        statements
    )  # RESERVE_SQL
    assert any("pg_advisory_xact_lock" in s for s in statements), statements  # QUOTES_SQL
    assert any("INSERT INTO orders" in s for s in statements), statements  # ORDER_SQL
    assert any("SKIP LOCKED" in s and "payment_expires_at <= LEAST(now()" in s for s in statements), statements

    # psycopg forgets (DEALLOCATE ALL) every prepared statement of a connection at each ROLLBACK, a rolled-back
    # savepoint included: a checkout refused inside an outer transaction (here the test's own) rolls back its
    # savepoint and starts the count again. An outermost checkout refused before any
    # write commits instead and keeps them (the tests below).
    with pytest.raises(StockConflict):
        checkout(customer=make_customer(), items=[(product.pk, 100)])
    assert _prepared() == []


# --- A refusal decided before any write ends with COMMIT (skincare.db.atomic_refusals_commit) -------------------


class _Endings:
    """Records how each outermost transaction of Django's connection ended ("commit" or "rollback"), calling
    through to the real ones: what was sent to PostgreSQL is unchanged."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[str] = []
        wrapper = connections["default"]
        for name in ("commit", "rollback"):
            real = getattr(wrapper, name)
            monkeypatch.setattr(wrapper, name, self._recording(name, real))

    def _recording(self, name: str, real: Any) -> Any:
        def call() -> None:
            self.seen.append(name)
            real()

        return call


def _warm(product: Any, make_customer: Any) -> None:
    """DB_PREPARE_THRESHOLD + 1 checkouts, then their orders cancelled: the checkout's statements are prepared on
    this connection (in the prepared mode)."""
    for _ in range(settings.DB_PREPARE_THRESHOLD + 1):
        customer = make_customer()
        order = checkout(customer=customer, items=[(product.pk, 1)])
        order_cancel(order_id=order.order_id, customer=customer)


def _state() -> tuple[Any, ...]:
    return (
        Order.objects.count(),
        OrderLine.objects.count(),
        Reservation.objects.count(),
        PaymentAttempt.objects.count(),
        StockMovement.objects.count(),
        sorted(Inventory.objects.values_list("product_id", "available_stock", "reserved_stock")),
    )


@pytest.mark.django_db(transaction=True)
def test_a_refusal_before_any_write_commits_and_keeps_the_prepared_statements(
    make_product, make_customer, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """Sold out, not started, over the limit in one request, unknown product: each refusal is decided by the quote
    read before anything is written, and ends with COMMIT, so psycopg keeps the connection's prepared statements
    (the prepared mode) and the database is as before (both modes)."""
    settings.SOLD_OUT_CACHE_MS = 0  # the second sold-out refusal too is the quote read's (the memory's opens none)
    stocked = make_product(stock=50, max_per_customer=3)
    sold_out = make_product(stock=0)
    scheduled = make_product(stock=5)
    set_window(scheduled, starts_in=3600)
    _warm(stocked, make_customer)
    prepared = sorted(_prepared())
    if settings.DB_PREPARED_STATEMENTS:
        assert any("pg_advisory_xact_lock" in s for s in prepared), prepared  # QUOTES_SQL
    else:
        assert prepared == []
    customer = make_customer()
    before = _state()
    endings = _Endings(monkeypatch)
    refusals = [
        (StockConflict, [(sold_out.pk, 1)]),
        (SaleNotStarted, [(scheduled.pk, 1)]),
        (PurchaseLimitExceeded, [(stocked.pk, 4)]),
        (InvalidProduct, [(stocked.pk, 1), (10**12, 1)]),
    ] * 2  # twice: the refusals' own statements stay prepared too
    for error, items in refusals:
        with pytest.raises(error):
            checkout(customer=customer, items=items)
    assert endings.seen == ["commit"] * len(refusals)
    assert _state() == before
    after = _prepared()
    assert set(prepared) <= set(after)  # not one statement forgotten
    if not settings.DB_PREPARED_STATEMENTS:
        assert after == []
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_a_refusal_after_a_write_still_rolls_back_everything(
    make_product, make_customer, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """The control: refusals decided after ORDER_SQL wrote the order (too many pending orders, the per-customer
    limit with earlier orders) roll it all back: no order, line, reservation, payment attempt or ledger row is
    left, and psycopg forgets the prepared statements, as before."""
    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 1
    product = make_product(stock=50)
    limited = make_product(stock=50, max_per_customer=1)
    _warm(product, make_customer)
    pending = make_customer()
    checkout(customer=pending, items=[(product.pk, 1)])  # the one pending order allowed
    bought = make_customer()
    checkout(customer=bought, items=[(limited.pk, 1)])  # the one unit of the limited product, held
    before = _state()
    endings = _Endings(monkeypatch)
    with pytest.raises(TooManyPendingOrders):
        checkout(customer=pending, items=[(product.pk, 1)])
    with pytest.raises(PurchaseLimitExceeded):  # checked before the pending orders' cap
        checkout(customer=bought, items=[(limited.pk, 1)])
    assert endings.seen == ["rollback", "rollback"]
    assert _state() == before
    assert _prepared() == []
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_control_committing_every_refusal_would_keep_what_was_written(
    make_product, make_customer, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """Why the runner asks PostgreSQL whether the transaction wrote anything: with the question answered "nothing"
    regardless, the refusal after ORDER_SQL commits the order it had written (a pending order with its reservation
    and no stock held: the audit sees it)."""
    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 1
    product = make_product(stock=50)
    customer = make_customer()
    checkout(customer=customer, items=[(product.pk, 1)])
    before = Order.objects.count()
    monkeypatch.setattr(skincare_db, "_wrote_nothing", lambda: True)
    with pytest.raises(TooManyPendingOrders):
        checkout(customer=customer, items=[(product.pk, 1)])
    assert Order.objects.count() == before + 1  # the naive version keeps the refused order
    assert audit_inventory()


@pytest.mark.django_db(transaction=True)
def test_a_refusal_at_serializable_still_rolls_back(
    make_product, make_customer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SERIALIZABLE transaction's reads count against concurrent writers until it ends: its refusals keep
    ROLLBACK even when nothing was written (the quote read's limit refusal, after the runner switched the
    transaction to SERIALIZABLE)."""
    product = make_product(stock=5, strategy=InventoryStrategy.SERIALIZABLE, max_per_customer=1)
    customer = make_customer()
    before = _state()
    endings = _Endings(monkeypatch)
    with pytest.raises(PurchaseLimitExceeded):
        checkout(customer=customer, items=[(product.pk, 2)])
    assert endings.seen == ["rollback", "rollback"]  # READ COMMITTED's IsolationRequired, then SERIALIZABLE's
    assert _state() == before
