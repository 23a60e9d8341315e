"""Ops stock writes behind a real PgBouncer (transaction mode): they run through the one transaction runner
(``skincare.db.retry_transient``), so their transaction gets ``SET LOCAL`` lock and statement timeouts and a stock
manager's change during a sale waits at most ``DB_LOCK_TIMEOUT_MS`` for a stock row, then answers busy (503).

This process's own default connection is pointed at the PgBouncer for the write (``DB_PGBOUNCER=true``: no libpq
``options``, which PgBouncer refuses); the lock holder runs on a direct connection of its own thread. Like
``skincare/tests/test_pgbouncer.py``, marked ``pgbouncer``: `make test` installs it; run directly without it, the
tests fail loudly.
"""

import contextlib
import threading
from collections.abc import Iterator

import pytest
from django.db import connection, connections, transaction

from devtools import pgbouncer
from devtools.testing import assert_invariants
from inventory import services
from inventory.buckets import LOCK_ALL_BUCKETS_SQL
from inventory.models import Inventory, StockBucket, StockMovement
from skincare.db import TIMEOUTS_SQL
from skincare.errors import ServiceBusy

pytestmark = [pytest.mark.pgbouncer, pytest.mark.django_db(transaction=True)]

LOCK_TIMEOUT_MS = 300


@pytest.fixture(scope="module")
def bouncer(django_db_setup: None, django_db_blocker: pytest.FixtureRequest) -> Iterator[pgbouncer.PgBouncer]:
    if pgbouncer.binary() is None:
        pytest.fail("pgbouncer is not installed: `make test` installs it as root (apt-get install pgbouncer)")
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        settings_dict = connection.settings_dict
    proxy = pgbouncer.PgBouncer.for_settings(settings_dict, default_pool_size=4).start()
    try:
        yield proxy
    finally:
        proxy.stop()


@contextlib.contextmanager
def through(bouncer: pgbouncer.PgBouncer, settings) -> Iterator[list[str]]:  # type: ignore[no-untyped-def]
    """This thread's default connection goes through ``bouncer`` as a ``DB_PGBOUNCER=true`` deployment's does;
    yields the statements sent meanwhile, and the ``lock_timeout`` in force when the stock rows were locked."""
    settings.PGBOUNCER = True
    settings.DB_LOCK_TIMEOUT_MS = LOCK_TIMEOUT_MS
    direct = connection.settings_dict
    options = {name: value for name, value in direct.get("OPTIONS", {}).items() if name != "options"}
    connection.close()
    connection.settings_dict = {**direct, "HOST": "127.0.0.1", "PORT": bouncer.port, "OPTIONS": options}
    sent: list[str] = []

    def record(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        sent.append(sql)
        if sql == LOCK_ALL_BUCKETS_SQL:  # on a cursor of its own: the lock statement's rows are still to be read
            sent.append(context["cursor"].connection.execute("SHOW lock_timeout").fetchone()[0])
        return execute(sql, params, many, context)

    try:
        with connection.execute_wrapper(record):
            yield sent
    finally:
        connection.close()
        connection.settings_dict = direct


def hold_stock_rows(product, *, held: threading.Event, release: threading.Event) -> None:
    """On this thread's own (direct) connection: lock the product's stock rows until ``release``."""
    try:
        with transaction.atomic():
            list(StockBucket.objects.select_for_update(no_key=True).filter(product=product))
            held.set()
            assert release.wait(timeout=60), "the test never released the lock"
    finally:
        connections.close_all()


def test_an_ops_write_behind_pgbouncer_times_out_busy_while_a_checkout_holds_the_row(
    bouncer,
    make_product,
    settings,  # type: ignore[no-untyped-def]
) -> None:
    product = make_product(stock=5)
    held, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=hold_stock_rows, args=(product,), kwargs={"held": held, "release": release})
    holder.start()
    try:
        assert held.wait(timeout=30)
        with through(bouncer, settings) as sent, pytest.raises(ServiceBusy):
            services.stock_adjust(product_id=product.pk, delta=3, note="restock during the sale")
    finally:
        release.set()
        holder.join(timeout=60)
    assert not holder.is_alive()
    # the runner bounded the transaction with SET LOCAL before its first statement; the lock waited that long only
    assert TIMEOUTS_SQL in sent[:2]  # sent just before the first statement (recorded right after it)
    assert sent[sent.index(LOCK_ALL_BUCKETS_SQL) + 1] == f"{LOCK_TIMEOUT_MS}ms"
    assert Inventory.objects.get(product=product).available_stock == 5  # nothing written
    assert not StockMovement.objects.filter(product=product, reason="adjustment").exists()

    with through(bouncer, settings):  # the row is free again: the same write goes through the pooler
        inventory = services.stock_adjust(product_id=product.pk, delta=3, note="restock during the sale")
        counted = services.stock_set_counted(
            product_id=product.pk, counted=7, expected_version=inventory.version, note="count"
        )
        services.stock_buckets_set(product_id=product.pk, buckets=4)
    assert counted.available_stock == 7
    assert sum(StockBucket.objects.filter(product=product).values_list("available_stock", flat=True)) == 7
    assert_invariants()


def test_control_without_the_runner_an_ops_write_behind_pgbouncer_has_no_lock_timeout(
    bouncer,
    make_product,
    settings,  # type: ignore[no-untyped-def]
) -> None:
    """What the ops writes ran with before they had the runner: behind PgBouncer no startup options, no SET LOCAL,
    so the stock rows are locked with the role's default lock_timeout in the database (what migrate set from the
    test settings' DB_LOCK_TIMEOUT_MS), not the runner's tighter one."""
    product = make_product(stock=5)
    role_default_ms = settings.DB_LOCK_TIMEOUT_MS  # migrate set the role's default from it (before `through`)
    unbounded = services.stock_adjust.__wrapped__  # type: ignore[attr-defined]  # the @transaction.atomic function
    with through(bouncer, settings) as sent:
        unbounded(product_id=product.pk, delta=1, note="no runner")
    assert TIMEOUTS_SQL not in sent
    shown = f"{role_default_ms // 1000}s" if role_default_ms % 1000 == 0 else f"{role_default_ms}ms"
    assert sent[sent.index(LOCK_ALL_BUCKETS_SQL) + 1] == shown
