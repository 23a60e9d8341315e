"""Through a real PgBouncer (Debian's 1.18) in transaction mode, in front of real gunicorn workers.

The flash-sale race and the lock-timeout → 503 path must survive a transaction-mode pooler: the timeouts come
from ``SET LOCAL`` inside each service transaction (``skincare.db.retry_transient``), never from the libpq
``options`` startup parameter, which PgBouncer refuses, or from a session ``SET``, which would leak to whichever
client gets that server connection next. `make test` installs pgbouncer as root (CI requires it); without it
these tests are deselected by the Makefile with a warning, and fail loudly when run directly.
"""

import threading
import urllib.request
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection, connections, transaction

from devtools import pgbouncer
from devtools.processes import Gunicorn
from devtools.testing import assert_invariants, run_concurrently
from inventory.models import Inventory, StockBucket
from orders.models import Order, Reservation
from payments.tests.test_checkout_http_race import post_checkout, post_checkout_once

pytestmark = [pytest.mark.pgbouncer, pytest.mark.django_db(transaction=True)]

LOCK_TIMEOUT_MS = 300


def _conninfo(url: str) -> str:
    return url.replace("postgres://", "postgresql://", 1)


@pytest.fixture(scope="module")
def bouncer(django_db_setup: None, django_db_blocker: pytest.FixtureRequest) -> Iterator[pgbouncer.PgBouncer]:
    if pgbouncer.binary() is None:
        pytest.fail("pgbouncer is not installed: `make test` installs it as root (apt-get install pgbouncer)")
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        settings_dict = connection.settings_dict
    proxy = pgbouncer.PgBouncer.for_settings(settings_dict, default_pool_size=10).start()
    try:
        yield proxy
    finally:
        proxy.stop()  # closes its server connections, so the test database can be dropped


@pytest.fixture(scope="module")
def web(bouncer: pgbouncer.PgBouncer, django_db_blocker: pytest.FixtureRequest) -> Iterator[Gunicorn]:
    """Three sync gunicorn workers whose only database address is the PgBouncer (persistent client connections)."""
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        dbname = connection.settings_dict["NAME"]
    server = Gunicorn(
        bouncer.url(dbname),
        workers=3,
        conn_max_age=60,
        extra_env={"DB_PGBOUNCER": "true", "DB_LOCK_TIMEOUT_MS": LOCK_TIMEOUT_MS, "ACCESS_LOG": "false"},
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()
        # The lock-timeout test's 503 is expected (django.request logs every 5xx); nothing else may be there.
        unexpected = [line for line in server.errors_in_log() if '"status_code": 503' not in line]
        assert unexpected == [], unexpected


def test_pgbouncer_refuses_the_libpq_options_startup_parameter(bouncer: pgbouncer.PgBouncer) -> None:
    """Why the timeouts are not startup parameters behind PgBouncer (the settings leave them out with DB_PGBOUNCER)."""
    with pytest.raises(psycopg.OperationalError, match="unsupported startup parameter: options"):
        psycopg.connect(_conninfo(bouncer.url("postgres")), options="-c lock_timeout=100")


def test_set_local_timeouts_do_not_leak_to_the_next_client_but_session_set_does() -> None:
    """One server connection shared by two clients, one after the other: SET LOCAL ends with its transaction;
    a session SET (the control) is inherited by the next client."""
    settings_dict = connection.settings_dict
    with pgbouncer.PgBouncer.for_settings(settings_dict, default_pool_size=1) as single:
        url = _conninfo(single.url(str(settings_dict["NAME"])))
        with psycopg.connect(url, autocommit=True) as first:
            with first.transaction():
                first.execute("SELECT set_config('lock_timeout', '1234', true)")
                assert first.execute("SHOW lock_timeout").fetchone() == ("1234ms",)
            baseline = first.execute("SHOW lock_timeout").fetchone()
        assert baseline != ("1234ms",)
        with psycopg.connect(url, autocommit=True) as second:
            assert second.execute("SHOW lock_timeout").fetchone() == baseline
            second.execute("SET lock_timeout = '4321ms'")  # control: session state
        with psycopg.connect(url, autocommit=True) as third:
            assert third.execute("SHOW lock_timeout").fetchone() == ("4321ms",)  # leaked to another client
            third.execute("RESET lock_timeout")


def test_flash_sale_race_through_pgbouncer(web: Gunicorn, make_product, make_customer) -> None:  # type: ignore[no-untyped-def]
    product = make_product(stock=1)
    buyers = [make_customer() for _ in range(100)]

    outcomes = run_concurrently(
        100, lambda i: post_checkout(web.base, buyers[i].api_token, [{"product_id": product.pk, "qty": 1}])
    )

    assert [o.error for o in outcomes if o.error] == []
    statuses = sorted(o.value[0] for o in outcomes)  # type: ignore[index]
    assert statuses.count(201) == 1, statuses
    assert statuses.count(409) == 99, statuses
    inventory = Inventory.objects.get(product=product)
    assert (inventory.available_stock, inventory.reserved_stock) == (0, 1)
    assert Reservation.objects.filter(product=product, status="active").count() == 1
    assert Order.objects.count() == 1
    assert_invariants()


def _metric(base: str, name: str) -> float:
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def test_lock_timeout_gives_503_through_pgbouncer_then_the_retry_succeeds(
    web: Gunicorn,
    make_product,  # type: ignore[no-untyped-def]
    customer,  # type: ignore[no-untyped-def]
) -> None:
    product = make_product(stock=5)
    locked, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def hold_inventory_row() -> None:
        try:
            with transaction.atomic():
                list(StockBucket.objects.select_for_update().filter(product=product, bucket=0))
                locked.set()
                assert release.wait(timeout=60), "the test never released the lock"
        except BaseException as exc:
            errors.append(exc)
            locked.set()
        finally:
            connections.close_all()

    busy_before = _metric(web.base, 'skincare_db_busy_total{sqlstate="55P03"}')
    holder = threading.Thread(target=hold_inventory_row, name="lock-holder")
    holder.start()
    try:
        assert locked.wait(timeout=30)
        assert errors == []
        # One attempt, no client retry: the 503 itself is what this test is about.
        status, body, retry_after = post_checkout_once(
            web.base, customer.api_token, [{"product_id": product.pk, "qty": 1}]
        )
    finally:
        release.set()
        holder.join(timeout=60)
    assert not holder.is_alive()
    assert errors == []

    assert (status, body["code"], retry_after) == (503, "busy", "1"), body
    assert _metric(web.base, 'skincare_db_busy_total{sqlstate="55P03"}') == busy_before + 1
    assert Order.objects.count() == 0  # rolled back whole
    retry_status, retry_body = post_checkout(web.base, customer.api_token, [{"product_id": product.pk, "qty": 1}])
    assert retry_status == 201, retry_body
    assert_invariants()
