"""A stalled gateway costs the rest of the shop nothing (live: gunicorn with three sync workers, as ``make run``
serves, and the Midtrans fake's Snap endpoint answering nothing).

Six buyers keep opening their payment pages while Snap does not answer. Once each worker's breaker has opened
(``GATEWAY_BREAKER_FAILURES`` calls in a row failed), a payment page is answered at once (503 gateway_unavailable,
Retry-After) and the catalogue is served as fast as without the storm. Control: without the breaker every page visit
holds a worker for the whole deadline, and catalogue reads queue behind them for about as long.

The bound is on the order of the deadline, not a tight timing: a catalogue read takes tens of milliseconds here (it is
the benchmark's business how many); the test tells "waited behind a held worker" (≥ the deadline) from "served".
"""

import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from devtools.fake_midtrans import FakeMidtrans
from devtools.processes import Gunicorn
from devtools.testing import assert_invariants
from payments.testing import place_order
from skincare.tests.test_metrics import _url as database_url_for_children

DEADLINE = 1  # MIDTRANS_TIMEOUT_SECONDS (a whole second is its smallest setting)
STORM = 6  # buyers opening payment pages at once, twice the workers
ROUNDS = 4  # visits each before the catalogue is read, so that every worker met the stalled gateway


def get(url, token=""):
    """(status, seconds) of one GET, redirects not followed."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})

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
@pytest.mark.parametrize("breaker_failures", [2, 1000], ids=["protected", "control-no-breaker"])
def test_a_stalled_gateway_leaves_the_catalogue_as_fast_as_before(make_product, make_customer, breaker_failures):
    product = make_product(stock=50, price="129000.00")
    buyers = [make_customer() for _ in range(STORM)]
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
            "GATEWAY_BREAKER_FAILURES": breaker_failures,
            "GATEWAY_BREAKER_SECONDS": 60,
        }
        with Gunicorn(database_url_for_children(), workers=3, conn_max_age=60, extra_env=env) as web:
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
            done.set()
            for thread in threads:
                thread.join(timeout=120)
    assert_invariants()
    assert {status for status, _ in pages} == {503}  # Snap never answered: every page visit is an honest 503
    assert {status for status, _ in during} == {200}
    slowest = max(seconds for _, seconds in during)
    if breaker_failures == 2:
        assert slowest < DEADLINE / 2, (slowest, before)  # served, not queued behind a held worker
        assert sum(1 for path in fake.requests if path[1] == "/snap/v1/transactions") <= 3 * 2 + STORM
    else:
        assert slowest >= DEADLINE * 0.8, (slowest, before)  # the control: a read waited behind a held worker
