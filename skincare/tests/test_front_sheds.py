"""The front sheds load: through a real HAProxy (devtools/haproxy.py's configuration) in front of real gunicorn
workers, a request that cannot start on a worker within ``timeout queue`` is answered by the front itself, 503 with
Retry-After and ``X-Shed-By: front`` in the API's error shape, instead of waiting on; the control, the same front
with a queue timeout far beyond the wait, keeps the request waiting until a worker frees up.

The one worker slot (HAProxy's per-server ``maxconn 1``) is held by a checkout waiting for a stock row lock this
test holds, released by an event; gunicorn's second worker answers HAProxy's health checks meanwhile."""

import csv
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from email.message import Message

import pytest
from django.db import transaction

from checkout.tests.test_checkout_http_race import post_checkout_once
from devtools.haproxy import HAProxy
from devtools.processes import Gunicorn
from devtools.testing import ThreadRun, lock_waiters, wait_until
from inventory.models import StockBucket
from skincare.tests.test_metrics import _url as database_url_for_children

pytestmark = [pytest.mark.haproxy, pytest.mark.django_db(transaction=True)]

BOUND_MS = 300  # the front's queue timeout in the shedding case
WAITS_MS = 60_000  # the control's: far beyond anything this test waits


def get(url: str) -> tuple[int, Message, bytes]:
    """Status, headers (case-insensitive: HAProxy sends its own in lower case) and body."""
    try:
        with urllib.request.urlopen(url, timeout=90) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def queued_at_front(lb: HAProxy) -> int:
    """Requests waiting in the backend's queue right now (``show stat``, the BACKEND row's ``qcur``)."""
    rows = csv.DictReader(lb.command("show stat").lstrip("# ").splitlines())
    return sum(int(row["qcur"] or 0) for row in rows if row["svname"] == "BACKEND")


@pytest.fixture
def web(db: None) -> Iterator[Gunicorn]:
    # The held checkout waits for the row lock longer than the control waits for the queued request.
    env = {"ACCESS_LOG": "false", "DB_LOCK_TIMEOUT_MS": 20_000}
    with Gunicorn(database_url_for_children(), workers=2, conn_max_age=0, extra_env=env) as server:
        yield server


class HeldWorker:
    """A checkout through the front that occupies its one worker slot until ``release()``: it waits for the
    product's stock row, locked by a thread of this test."""

    def __init__(self, lb: HAProxy, product_id: int, token: str) -> None:
        self.product_id = product_id
        self.locked, self.released = threading.Event(), threading.Event()
        self.holder = ThreadRun(self.hold, name="row-lock-holder")
        assert self.locked.wait(timeout=30)
        self.checkout = ThreadRun(
            lambda: post_checkout_once(lb.base, token, [{"product_id": product_id, "qty": 1}]), name="held-checkout"
        )
        wait_until(lock_waiters, what="the checkout waiting for the row lock")

    def hold(self) -> None:
        with transaction.atomic():
            list(StockBucket.objects.select_for_update().filter(product_id=self.product_id))
            self.locked.set()
            assert self.released.wait(timeout=90), "the test never released the lock"

    def release(self) -> tuple[int, dict[str, object], str | None]:
        self.released.set()
        assert self.holder.join().error is None
        outcome = self.checkout.join()
        assert outcome.error is None
        return outcome.value  # type: ignore[return-value]


def test_a_request_that_cannot_start_within_the_bound_gets_the_fronts_503_with_retry_after(
    web: Gunicorn,
    make_product,  # type: ignore[no-untyped-def]
    customer,  # type: ignore[no-untyped-def]
) -> None:
    product = make_product(stock=5)
    with HAProxy({"web0": web.port}, maxconn=1, queue_timeout_ms=BOUND_MS) as lb:
        held = HeldWorker(lb, product.pk, customer.api_token)
        try:
            started = time.monotonic()
            status, headers, body = get(f"{lb.base}/healthz")
            waited = time.monotonic() - started
        finally:
            answer = held.release()
    assert (status, headers.get("Retry-After"), headers.get("X-Shed-By")) == (503, "2", "front"), body
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body) == {"error": "The shop is busy right now; please retry shortly.", "code": "busy"}
    assert BOUND_MS / 1000 <= waited < 4 * BOUND_MS / 1000  # answered at the bound, not after the held request
    assert answer[0] == 201, answer  # the request that held the worker was served, not shed


def test_control_without_the_bound_the_request_waits_for_a_worker(
    web: Gunicorn,
    make_product,  # type: ignore[no-untyped-def]
    customer,  # type: ignore[no-untyped-def]
) -> None:
    product = make_product(stock=5)
    with HAProxy({"web0": web.port}, maxconn=1, queue_timeout_ms=WAITS_MS) as lb:
        held = HeldWorker(lb, product.pk, customer.api_token)
        try:
            waiting = ThreadRun(lambda: get(f"{lb.base}/healthz"), name="queued-request")
            wait_until(lambda: queued_at_front(lb) == 1, what="the request queued at the front")
            waiting.thread.join(timeout=3 * BOUND_MS / 1000)  # three times the bound that shed it above
            still_waiting = waiting.thread.is_alive()
        finally:
            answer = held.release()
        outcome = waiting.join()
    assert still_waiting
    assert outcome.error is None
    status, headers, _body = outcome.value  # type: ignore[misc]
    assert (status, headers.get("X-Shed-By")) == (200, None)  # served once the worker was free
    assert answer[0] == 201, answer
