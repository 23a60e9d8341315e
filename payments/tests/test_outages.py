"""Outages against the real stack: gunicorn (sync workers, persistent connections, as in production; the outage
test runs with and without connection health checks) in front of the embedded PostgreSQL, which these tests stop, start and restart.

- database down: every endpoint answers 503 ``database_unavailable`` with ``Retry-After`` (healthz stays 200),
  and the service recovers by itself when the database is back;
- PostgreSQL restarted in the middle of a checkout storm: only 201/409/503, and exactly the 201s exist;
- a gunicorn worker SIGKILLed while it serves a checkout: the dropped checkout left nothing, the others stand.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest
from django.db import connections, transaction

from checkout.testing import place_order
from devtools import devdb
from devtools.processes import free_port
from devtools.testing import assert_invariants, backends, wait_for_lock_waiters, wait_until
from inventory.models import Inventory, StockBucket
from orders.models import Order, Reservation
from orders.tests.test_sweeper import subprocess_env
from payments import sandbox, signing

pytestmark = pytest.mark.django_db(transaction=True)

BASE_DIR = Path(__file__).resolve().parents[2]
SECRET = "whsec-outage-secret"


def http(url, *, method="GET", body=None, headers=None, timeout=30):
    """(status, headers, parsed JSON or None); a dropped connection raises."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            raw, status, hdrs = response.read(), response.status, response.headers
    except urllib.error.HTTPError as error:
        raw, status, hdrs = error.read(), error.code, error.headers
    try:
        return status, hdrs, json.loads(raw)
    except ValueError:
        return status, hdrs, None


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


@pytest.fixture
def embedded_server():
    """The embedded server's socket directory; whatever a test does, the server is up again afterwards and this
    process's connections are fresh."""
    socket_dir = devdb._socket_dir()
    assert socket_dir is not None and devdb.is_embedded(os.environ.get("DATABASE_URL", "")), (
        "the outage tests stop and start the embedded PostgreSQL (run them with DATABASE_URL unset or its URL)"
    )
    yield socket_dir
    if devdb._socket_dir() is None:
        devdb.start_server(socket_dir=socket_dir)
    connections.close_all()


@pytest.fixture
def gunicorn():
    """gunicorn with production-like persistent connections (no per-request health checks: config/settings.py)."""
    port = free_port()
    env = {
        **subprocess_env(),
        "DB_CONN_MAX_AGE": "60",
        "DB_LOCK_TIMEOUT_MS": "60000",
        "PAYMENT_WEBHOOK_SECRET": SECRET,
        "PAYMENT_SANDBOX": "true",
        "PAYMENT_SANDBOX_ALLOW_WITHOUT_DEBUG": "true",  # a test server: the sandbox start-up check allows it
        "MAX_PENDING_ORDERS_PER_CUSTOMER": "0",  # setup: the test's one customer checks out many times
        "WEB_CONCURRENCY": "2",
        "PORT": str(port),
        "LOG_LEVEL": "WARNING",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.conf.py", "config.wsgi:application"],
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"

    def up():
        try:
            return http(f"{base}/healthz", timeout=2)[0] == 200
        except OSError:
            return False

    try:
        wait_until(up, timeout=60, what="gunicorn to answer")
        yield proc, base
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        connections.close_all()


def checkout(base, token, product_id, qty=1):
    body = json.dumps({"items": [{"product_id": product_id, "qty": qty}]}).encode()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    return http(f"{base}/v1/checkout", method="POST", body=body, headers=headers)


def endpoints(base, token, product, order):
    """One request to every endpoint: name → (status, headers, body)."""
    auth = {"Authorization": f"Bearer {token}"}
    event = json.dumps(
        {
            "event_id": f"evt-{time.monotonic_ns()}",
            "type": "payment.failed",
            "order_id": order.pk,
            "amount": "1.00",
            "currency": "IDR",
        }
    ).encode()
    webhook_headers = {"Content-Type": "application/json", "X-Signature": signing.sign(body=event, secret=SECRET)}
    admin = urllib.request.build_opener(NoRedirect)
    admin_req = urllib.request.Request(
        f"{base}/admin/", headers={"Cookie": "sessionid=abcdefghijklmnopqrstuvwxyz012345"}
    )
    try:
        with admin.open(admin_req, timeout=30) as response:
            admin_status, admin_headers, admin_raw = response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        admin_status, admin_headers, admin_raw = error.code, error.headers, error.read()
    try:
        admin_body = json.loads(admin_raw)
    except ValueError:
        admin_body = None
    return {
        "healthz": http(f"{base}/healthz"),
        "readyz": http(f"{base}/readyz"),
        "products": http(f"{base}/v1/products"),
        "product": http(f"{base}/v1/products/{product.pk}"),
        "checkout": checkout(base, token, product.pk),
        "order": http(f"{base}/v1/orders/{order.pk}", headers=auth),
        "cancel": http(f"{base}/v1/orders/{order.pk}/cancel", method="POST", headers=auth),
        "webhook": http(f"{base}/v1/payments/webhook", method="POST", body=event, headers=webhook_headers),
        "sandbox": http(
            base
            + sandbox.sandbox_path(order_id=order.pk, customer_id=order.customer_id, until=order.payment_expires_at)
        ),  # the signed link checkout hands out
        "admin": (admin_status, admin_headers, admin_body),
    }


def test_database_down_every_endpoint_503_then_recovers_without_restart(
    embedded_server, gunicorn, make_product, customer
):
    _proc, base = gunicorn
    product = make_product(stock=50, price="1.00")
    order = place_order(customer=customer, items=[(product.pk, 1)])
    for _ in range(4):  # both workers hold a persistent connection
        assert all(status < 500 for status, _h, _b in endpoints(base, customer.api_token, product, order).values())
    before = (Order.objects.count(), Reservation.objects.count())

    devdb.stop_server()
    try:
        for _ in range(2):
            answers = endpoints(base, customer.api_token, product, order)
            assert answers.pop("healthz")[0] == 200  # liveness does not depend on the database
            for name, (status, headers, body) in answers.items():
                assert status == 503, (name, status, body)
                assert body["code"] == "database_unavailable", (name, body)
                assert headers["Retry-After"] == "2", name
    finally:
        devdb.start_server(socket_dir=embedded_server)
    connections.close_all()

    wait_until(lambda: http(f"{base}/readyz")[0] == 200, timeout=30, what="readyz after the restart")
    for _ in range(4):  # every worker reconnected by itself: no restart, no 5xx
        answers = endpoints(base, customer.api_token, product, order)
        assert {name: a[0] for name, a in answers.items()} == {
            "healthz": 200,
            "readyz": 200,
            "products": 200,
            "product": 200,
            "checkout": 201,
            "order": 200,
            "cancel": answers["cancel"][0],  # 200 the first time, then 409 order_not_pending
            "webhook": 200,
            "sandbox": 200,
            "admin": 302,
        }
        assert answers["cancel"][0] in (200, 409)
    assert Order.objects.count() == before[0] + 4  # the four checkouts after recovery, nothing from the outage
    assert_invariants()


class Storm:
    """Buyers posting checkouts in a loop until told to stop; every answer is recorded with its phase."""

    def __init__(self, base, buyers, product_id):
        self.base, self.buyers, self.product_id = base, buyers, product_id
        self.answers, self.dropped = [], []
        self.lock = threading.Condition()
        self.phase = "before"
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.buy, args=(b,), daemon=True) for b in buyers]

    def buy(self, buyer):
        while not self.stop.is_set():
            phase = self.phase
            try:
                status, _headers, body = checkout(self.base, buyer.api_token, self.product_id)
            except OSError as exc:  # the worker serving it died
                with self.lock:
                    self.dropped.append((buyer.pk, phase, exc))
                    self.lock.notify_all()
                continue
            with self.lock:
                self.answers.append((buyer.pk, phase, status, body))
                self.lock.notify_all()

    def count(self, phase, status):
        return sum(1 for _b, p, s, _body in self.answers if p == phase and s == status)

    def wait_for(self, predicate, what, timeout=60):
        with self.lock:
            assert self.lock.wait_for(predicate, timeout=timeout), f"storm: timed out waiting for {what}"

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)
        assert not any(t.is_alive() for t in self.threads)


def assert_exactly_the_201s_exist(storm, product, initial):
    connections.close_all()
    created = {body["order_id"] for _b, _p, status, body in storm.answers if status == 201}
    assert set(Order.objects.filter(lines__product=product).values_list("pk", flat=True)) == created
    assert set(Reservation.objects.filter(product=product).values_list("order_id", "status")) == {
        (pk, "active") for pk in created
    }
    inventory = Inventory.objects.get(product=product)
    assert (inventory.available_stock, inventory.reserved_stock) == (initial - len(created), len(created))
    assert_invariants()


def test_postgres_restarted_during_a_checkout_storm_only_201_409_503_and_exactly_the_201s_exist(
    embedded_server, gunicorn, make_product, make_customer
):
    _proc, base = gunicorn
    product = make_product(stock=5000, price="1.00")
    buyers = [make_customer() for _ in range(6)]

    with Storm(base, buyers, product.pk) as storm:
        storm.wait_for(lambda: storm.count("before", 201) >= 10, "checkouts before the restart")
        storm.phase = "down"
        devdb.stop_server()
        try:
            storm.wait_for(lambda: storm.count("down", 503) >= 6, "503s while the database is down")
        finally:
            devdb.start_server(socket_dir=embedded_server)
        storm.phase = "after"
        storm.wait_for(lambda: storm.count("after", 201) >= 10, "checkouts after the restart")

    assert storm.dropped == []
    assert {status for _b, _p, status, _body in storm.answers} <= {201, 409, 503}
    codes = {body["code"] for _b, _p, status, body in storm.answers if status == 503}
    assert codes <= {"database_unavailable", "busy"}, codes
    assert "database_unavailable" in codes
    assert_exactly_the_201s_exist(storm, product, 5000)


def in_flight(worker: psutil.Process, base: str) -> int:
    """The client connections a gunicorn worker has accepted and not closed (on gunicorn's port)."""
    port = int(base.rsplit(":", 1)[1])
    established = worker.net_connections(kind="tcp")
    return sum(1 for c in established if c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port == port)


def test_gunicorn_worker_sigkilled_while_serving_a_checkout(embedded_server, gunicorn, make_product, make_customer):
    proc, base = gunicorn
    product = make_product(stock=5000, price="1.00")
    buyers = [make_customer() for _ in range(4)]

    with Storm(base, buyers, product.pk) as storm:
        storm.wait_for(lambda: storm.count("before", 201) >= 10, "checkouts before the kill")
        with transaction.atomic():
            # Hold the product's row: every buyer's current checkout stops at its stock UPDATE, uncommitted, on one
            # of the two workers' threads.
            list(StockBucket.objects.select_for_update(no_key=True).filter(product=product, bucket=0))
            wait_for_lock_waiters(len(buyers))
            workers = psutil.Process(proc.pid).children()
            assert len(workers) == 2
            # The worker serving the most of them (a buyer's one connection is its one checkout in flight).
            serving = {worker.pid: in_flight(worker, base) for worker in workers}
            killed = max(serving, key=lambda pid: serving[pid])
            assert serving[killed] >= 1 and sum(serving.values()) == len(buyers), serving
            storm.phase = "kill"
            os.kill(killed, signal.SIGKILL)
            storm.wait_for(
                lambda: len(storm.dropped) >= serving[killed],
                "the killed worker's clients to see their connections drop",
            )
        storm.phase = "after"
        storm.wait_for(lambda: storm.count("after", 201) >= 10, "checkouts after the kill (a new worker)")
    # The killed worker's backends finish their UPDATEs, find their clients gone, and roll back.
    wait_until(lambda: not backends("state IN ('active', 'idle in transaction')"), what="the orphaned backends")

    assert len(storm.dropped) == serving[killed]  # exactly the checkouts the killed worker was serving
    assert {status for _b, _p, status, _body in storm.answers} == {201}
    assert_exactly_the_201s_exist(storm, product, 5000)  # the dropped checkout never committed
