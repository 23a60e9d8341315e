"""Through a real PgBouncer (Debian's 1.18) in transaction mode, in front of real gunicorn workers.

The flash-sale race and the lock-timeout → 503 path must survive a transaction-mode pooler: the timeouts come
from ``SET LOCAL`` inside each service transaction (``skincare.db.retry_transient``), never from the libpq
``options`` startup parameter, which PgBouncer refuses, or from a session ``SET``, which would leak to whichever
client gets that server connection next. `make test` installs pgbouncer as root (CI requires it); without it
these tests are deselected by the Makefile with a warning, and fail loudly when run directly.
"""

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import psycopg
import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.db import connection, connections, transaction
from django.test import override_settings

from checkout.tests.test_checkout_http_race import post_checkout, post_checkout_once
from devtools import pgbouncer
from devtools.processes import Gunicorn
from devtools.testing import assert_invariants, run_concurrently, wait_until
from inventory.models import Inventory, StockBucket
from orders.models import Order, Reservation

pytestmark = [pytest.mark.pgbouncer, pytest.mark.django_db(transaction=True)]

LOCK_TIMEOUT_MS = 300
# The waiting room's tables: a poll reads them outside any service transaction (autocommit).
QUEUE_TABLES = "queue_passes, product_queues"


def _conninfo(url: str) -> str:
    return url.replace("postgres://", "postgresql://", 1)


def migrate_with_lock_timeout(lock_timeout_ms: int) -> None:
    """``manage.py migrate`` as a deployment runs it, with the web servers' DB_LOCK_TIMEOUT_MS: it also sets the
    role's default timeouts in the (test) database, which every server connection PgBouncer opens starts with."""
    with override_settings(DB_LOCK_TIMEOUT_MS=lock_timeout_ms):
        call_command("migrate", verbosity=0)


@pytest.fixture(scope="module")
def bouncer(django_db_setup: None, django_db_blocker: pytest.FixtureRequest) -> Iterator[pgbouncer.PgBouncer]:
    if pgbouncer.binary() is None:
        pytest.fail("pgbouncer is not installed: `make test` installs it as root (apt-get install pgbouncer)")
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        settings_dict = connection.settings_dict
        migrate_with_lock_timeout(int(LOCK_TIMEOUT_MS))
    proxy = pgbouncer.PgBouncer.for_settings(settings_dict, default_pool_size=10).start()
    try:
        yield proxy
    finally:
        proxy.stop()  # closes its server connections, so the test database can be dropped
        with django_db_blocker.unblock():  # type: ignore[attr-defined]
            migrate_with_lock_timeout(django_settings.DB_LOCK_TIMEOUT_MS)


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


def hold_table_lock(
    tables: str, locked: threading.Event, release: threading.Event, errors: list[BaseException]
) -> None:
    """ACCESS EXCLUSIVE on ``tables`` (a direct connection) until ``release``: every read of them waits."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"LOCK TABLE {tables} IN ACCESS EXCLUSIVE MODE")
            locked.set()
            assert release.wait(timeout=60), "the test never released the lock"
    except BaseException as exc:
        errors.append(exc)
        locked.set()
    finally:
        connections.close_all()


def get_json(url: str, token: str) -> tuple[int, dict[str, object], str | None]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read()), response.headers.get("Retry-After")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), error.headers.get("Retry-After")


def test_a_queue_poll_outside_any_service_is_cut_by_the_roles_lock_timeout(web: Gunicorn, customer) -> None:  # type: ignore[no-untyped-def]
    """A poll is a read in autocommit, outside the transaction runner: behind PgBouncer its bound is the role's
    default in the database (set by migrate). Its tables locked elsewhere, it answers 503 busy within the bound
    instead of waiting for the lock (the control below shows the same read unbounded without the role's default)."""
    locked, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []
    holder = threading.Thread(target=hold_table_lock, args=(QUEUE_TABLES, locked, release, errors))
    busy_before = _metric(web.base, 'skincare_db_busy_total{sqlstate="55P03"}')
    holder.start()
    try:
        assert locked.wait(timeout=30)
        assert errors == []
        status, body, retry_after = get_json(f"{web.base}/v1/products/1/queue", customer.api_token)
    finally:
        release.set()
        holder.join(timeout=60)
    assert errors == []
    assert (status, body["code"], retry_after) == (503, "busy", "1"), body
    assert _metric(web.base, 'skincare_db_busy_total{sqlstate="55P03"}') == busy_before + 1
    # Lock released: the same poll is answered (no such queue here: 404).
    assert get_json(f"{web.base}/v1/products/1/queue", customer.api_token)[0] == 404


def _reset_role_timeouts() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_database()")
        database = connection.ops.quote_name(cursor.fetchone()[0])
        for name in ("lock_timeout", "statement_timeout"):
            cursor.execute(f"ALTER ROLE CURRENT_USER IN DATABASE {database} RESET {name}")


def test_control_without_the_roles_defaults_a_pooled_read_waits_unbounded() -> None:
    """Control: the role's defaults removed, a client of PgBouncer (which refuses the ``options`` startup parameter)
    has no bound at all, and the same read of a locked table is still waiting long after the bound would have cut
    it; after ``migrate``, a new server connection has the bounds again."""
    settings_dict = connection.settings_dict
    _reset_role_timeouts()
    try:
        with pgbouncer.PgBouncer.for_settings(settings_dict, default_pool_size=2) as single:
            url = _conninfo(single.url(str(settings_dict["NAME"])))
            with psycopg.connect(url, autocommit=True) as pooled:
                assert pooled.execute("SHOW lock_timeout").fetchone() == ("0",)
                assert pooled.execute("SHOW statement_timeout").fetchone() == ("0",)
                locked, release = threading.Event(), threading.Event()
                errors: list[BaseException] = []
                holder = threading.Thread(target=hold_table_lock, args=(QUEUE_TABLES, locked, release, errors))
                holder.start()
                reader_done = threading.Event()

                def read() -> None:
                    try:
                        pooled.execute("SELECT count(*) FROM queue_passes").fetchone()
                    except BaseException as exc:
                        errors.append(exc)
                    reader_done.set()

                reader = threading.Thread(target=read)
                try:
                    assert locked.wait(timeout=30)
                    reader.start()
                    with psycopg.connect(_conninfo(_direct_url(settings_dict)), autocommit=True) as watcher:
                        wait_until(
                            lambda: watcher.execute(
                                WAITED_SQL, [f"{3 * int(LOCK_TIMEOUT_MS)} milliseconds"]
                            ).fetchone()[0],
                            timeout=30,
                            what="the pooled read waiting on the lock for three times the bound",
                        )
                    assert not reader_done.is_set()  # still waiting: nothing bounds it
                finally:
                    release.set()
                    holder.join(timeout=60)
                    reader.join(timeout=60)
                assert errors == []
                assert reader_done.is_set()
        migrate_with_lock_timeout(int(LOCK_TIMEOUT_MS))
        with (
            pgbouncer.PgBouncer.for_settings(settings_dict, default_pool_size=1) as single,
            psycopg.connect(_conninfo(single.url(str(settings_dict["NAME"]))), autocommit=True) as pooled,
        ):
            assert pooled.execute("SHOW lock_timeout").fetchone() == (f"{LOCK_TIMEOUT_MS}ms",)
    finally:
        migrate_with_lock_timeout(int(LOCK_TIMEOUT_MS))  # the module's bound (the bouncer fixture restores it)


# A backend of the pooled read that has waited on a lock for at least the given interval.
WAITED_SQL = """
    SELECT EXISTS (SELECT 1 FROM pg_stat_activity
                    WHERE query = 'SELECT count(*) FROM queue_passes' AND wait_event_type = 'Lock'
                      AND now() - query_start > %s::interval)
"""


def _direct_url(settings_dict: dict[str, object]) -> str:
    return psycopg.conninfo.make_conninfo(
        dbname=str(settings_dict["NAME"]),
        host=str(settings_dict.get("HOST") or ""),
        port=str(settings_dict.get("PORT") or ""),
        user=str(settings_dict.get("USER") or ""),
    )


def test_every_pgbouncer_started_here_runs_productions_configuration(tmp_path, monkeypatch):
    """The tests' and rehearsals' PgBouncer is production's deploy/pgbouncer/pgbouncer.ini with its own places filled
    in: a setting changed there is the setting they run (control: the same change in a copy shows in the copy)."""
    bouncer = pgbouncer.PgBouncer(upstream_host="/run/pg", upstream_port=5433)
    bouncer.workdir = tmp_path
    production = pgbouncer.CONFIG.read_text()
    ran = bouncer._ini()
    for line in ("pool_mode = transaction", "max_client_conn = 2000", "default_pool_size = 40"):
        assert line in production and line in ran
    assert "* = host=/run/pg port=5433" in ran and f"listen_port = {bouncer.port}" in ran
    assert "auth_type = trust" in ran and "/run/pgbouncer" not in ran  # its own authentication and files
    changed = tmp_path / "pgbouncer.ini"
    changed.write_text(production.replace("max_client_conn = 2000", "max_client_conn = 77"))
    monkeypatch.setattr(pgbouncer, "CONFIG", changed)
    assert "max_client_conn = 77" in bouncer._ini()
    assert (
        "default_pool_size = 3" in pgbouncer.PgBouncer(upstream_host="h", default_pool_size=3, workdir=tmp_path)._ini()
    )
