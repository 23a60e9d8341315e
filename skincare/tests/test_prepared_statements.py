"""Server-side prepared statements (DB_PREPARED_STATEMENTS, skincare/settings.py): on by default on a direct
connection, off behind PgBouncer, and the one wrong combination refuses to start. `make test` runs the race,
strategy and fault suites once more with them off, so both ways of binding parameters are covered."""

import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from devtools.testing import make_overdue
from inventory.exceptions import StockConflict
from orders.models import Order
from orders.services import orders_expire_due
from payments.checkout import checkout

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = ROOT / "skincare" / "settings.py"


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


def test_prepared_statements_behind_pgbouncer_refuse_to_start() -> None:
    """The real start-up (manage.py check in a fresh process) refuses the combination PgBouncer 1.18 cannot serve."""
    env = {**os.environ, "DB_PGBOUNCER": "true", "DB_PREPARED_STATEMENTS": "true"}
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
    assert any("SKIP LOCKED" in s and "payment_expires_at <= now()" in s for s in statements), statements

    # psycopg forgets (DEALLOCATE ALL) every prepared statement of a connection at each ROLLBACK, a rolled-back
    # savepoint included: a refused checkout starts the count again (docs/benchmarks.md#issue-26).
    with pytest.raises(StockConflict):
        checkout(customer=make_customer(), items=[(product.pk, 100)])
    assert _prepared() == []
