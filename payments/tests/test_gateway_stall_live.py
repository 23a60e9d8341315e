"""A stalled gateway costs the rest of the shop nothing (live: gunicorn as ``make run`` serves it, three workers of
WEB_THREADS threads, and the Midtrans fake's Snap endpoint answering nothing).

Six buyers keep opening their payment pages while Snap does not answer. A web worker lets at most
``GATEWAY_MAX_CALLS`` of its requests wait on the gateway (the bulkhead, below its threads): its other threads serve
the catalogue and checkouts as fast as without the storm, even with the breaker never opening. With the breaker on,
once each worker's breaker has opened a payment page is answered at once. Control: sync workers without the breaker
(one request per worker): every page visit holds a whole worker for the deadline, and catalogue reads and checkouts
queue behind them for about as long.

The bound is on the order of the deadline, not a tight timing: a catalogue read takes tens of milliseconds here (it is
the benchmark's business how many); the test tells "waited behind a held worker" (>= the deadline) from "served".
"""

import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from checkout.testing import place_order
from devtools.fake_midtrans import FakeMidtrans
from devtools.processes import Gunicorn
from devtools.testing import assert_invariants
from skincare.tests.test_metrics import _url as database_url_for_children

DEADLINE = 1  # MIDTRANS_TIMEOUT_SECONDS (a whole second is its smallest setting)
STORM = 6  # buyers opening payment pages at once, twice the workers
ROUNDS = 4  # visits each before the catalogue is read, so that every worker met the stalled gateway


def get(url, token=""):
    """(status, seconds) of one GET, redirects not followed."""
    return send(urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {}))


def checkout(base, customer, product_id):
    """(status, seconds) of one checkout of a unit."""
    body = json.dumps({"items": [{"product_id": product_id, "qty": 1}]}).encode()
    headers = {"Authorization": f"Bearer {customer.api_token}", "Content-Type": "application/json"}
    return send(urllib.request.Request(f"{base}/v1/checkout", data=body, headers=headers, method="POST"))


def send(request):
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    started = time.monotonic()
    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=60) as response:
            status = response.status
            response.read()
    except urllib.error.HTTPError as exc:
        status = exc.code
    return status, time.monotonic() - started


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("worker_class", "breaker_failures"),
    [(None, 1000), (None, 2), ("sync", 1000)],
    ids=["bulkhead-breaker-never-opens", "bulkhead-and-breaker", "control-sync-workers-no-breaker"],
)
def test_a_stalled_gateway_leaves_the_catalogue_and_checkout_as_fast_as_before(
    make_product, make_customer, worker_class, breaker_failures
):
    product = make_product(stock=50, price="129000.00")
    buyers = [make_customer() for _ in range(STORM)]
    shoppers = [make_customer() for _ in range(3)]
    orders = [place_order(customer=buyer, items=[(product.pk, 1)]) for buyer in buyers]
    with FakeMidtrans() as fake:
        fake.stall("snap")
        env = {
            "ACCESS_LOG": "false",
            "PAYMENT_GATEWAY": "midtrans",
            "MIDTRANS_SERVER_KEY": fake.server_key,
            "MIDTRANS_SNAP_BASE_URL": fake.base_url,
            "MIDTRANS_API_BASE_URL": fake.base_url,
            "MIDTRANS_TIMEOUT_SECONDS": DEADLINE,
            "MIDTRANS_EXPIRY_MARGIN_SECONDS": 60,
            "PAYMENT_SESSIONS_PER_SECOND": 0,  # every page reaches the stalled gateway: the boundary is tested here
            "GATEWAY_BREAKER_FAILURES": breaker_failures,
            "GATEWAY_BREAKER_SECONDS": 60,
            "GATEWAY_MAX_CALLS": 2,
        }
        threads = 1 if worker_class == "sync" else None  # gunicorn's sync worker: one request at a time
        with Gunicorn(
            database_url_for_children(),
            workers=3,
            worker_class=worker_class,
            threads=threads,
            conn_max_age=60,
            extra_env=env,
        ) as web:
            catalogue = f"{web.base}/v1/products/{product.pk}"
            before = [get(catalogue)[1] for _ in range(5)]
            links = []
            for buyer, order in zip(buyers, orders, strict=True):
                with urllib.request.urlopen(  # the order's payment_url, as the buyer reads it
                    urllib.request.Request(
                        f"{web.base}/v1/orders/{order.pk}", headers={"Authorization": f"Bearer {buyer.api_token}"}
                    ),
                    timeout=60,
                ) as response:
                    links.append(json.loads(response.read())["payment_url"])
            warmed = threading.Barrier(STORM + 1)
            done = threading.Event()
            pages: list[tuple[int, float]] = []

            def storm(link: str) -> None:
                for _ in range(ROUNDS):
                    pages.append(get(link))
                warmed.wait(timeout=120)
                while not done.is_set():
                    pages.append(get(link))

            threads = [threading.Thread(target=storm, args=(link,)) for link in links]
            for thread in threads:
                thread.start()
            warmed.wait(timeout=120)  # every buyer has met the stalled gateway ROUNDS times
            during = [get(catalogue) for _ in range(10)]
            bought = [checkout(web.base, shopper, product.pk) for shopper in shoppers]
            done.set()
            for thread in threads:
                thread.join(timeout=120)
    assert_invariants()
    assert {status for status, _ in pages} == {503}  # Snap never answered: every page visit is an honest 503
    assert {status for status, _ in during} == {200}
    assert {status for status, _ in bought} == {201}
    slowest = max(seconds for _, seconds in during + bought)
    if worker_class is None:
        assert slowest < DEADLINE / 2, (slowest, before)  # served, not queued behind a held worker
    else:
        assert slowest >= DEADLINE * 0.8, (slowest, before)  # the control: a request waited behind a held worker
    if breaker_failures == 2:  # each worker stopped asking: its failures and the calls already waiting, no more
        assert sum(1 for path in fake.requests if path[1] == "/snap/v1/transactions") <= 3 * (2 + 2)
