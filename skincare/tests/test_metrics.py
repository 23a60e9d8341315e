"""Prometheus metrics: outcome labels are derived from the error classes, counters move with real requests, retries are counted on a real deadlock, the sweeper
serves its own, /metrics is loopback-or-token only, and gunicorn's workers are summed (multiprocess mode)."""

import re
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.db import connection, transaction
from django.test import Client
from prometheus_client import REGISTRY

from backoffice.tests.test_sweeper_loop import LineWatcher, run_command_in_thread
from checkout.testing import place_order
from checkout.tests.test_checkout_http_race import post_checkout
from devtools.processes import Gunicorn, free_port
from devtools.testing import make_overdue, run_concurrently
from inventory.models import StockBucket
from inventory.tests.test_sale_window import set_window
from payments import signing
from payments.models import ProcessedEvent
from payments.sessions import IGNORED
from skincare import api, errors
from skincare.db import retry_transient
from skincare.errors import declared_errors
from skincare.metrics import CHECKOUT_OUTCOMES, OTHER, WEBHOOK_OUTCOMES, bounded


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.mark.django_db
def test_checkout_outcomes_and_latency_are_counted(api, make_product) -> None:  # type: ignore[no-untyped-def]
    product = make_product(stock=1)
    before = {
        o: value("skincare_checkout_requests_total", outcome=o)
        for o in ("created", "stock_conflict", "invalid_request")
    }
    observed = value("skincare_checkout_duration_seconds_count")

    assert api.post("/v1/checkout", {"items": [{"product_id": product.pk, "qty": 1}]}, format="json").status_code == 201
    assert api.post("/v1/checkout", {"items": [{"product_id": product.pk, "qty": 1}]}, format="json").status_code == 409
    assert api.post("/v1/checkout", {"items": []}, format="json").status_code == 400

    for outcome in before:
        assert value("skincare_checkout_requests_total", outcome=outcome) == before[outcome] + 1, outcome
    assert value("skincare_checkout_duration_seconds_count") == observed + 3


@pytest.mark.django_db
def test_webhook_outcomes_are_counted_and_labels_stay_bounded(settings, customer, make_product) -> None:  # type: ignore[no-untyped-def]
    settings.PAYMENT_WEBHOOK_SECRET = "whsec-metrics-test"
    order = place_order(customer=customer, items=[(make_product(stock=2).pk, 1)])
    body = (
        b'{"event_id": "evt-m1", "type": "payment.succeeded", "order_id": %d, "amount": "%s", '
        b'"currency": "IDR", "provider_reference": "m1"}' % (order.pk, str(order.total).encode())
    )
    paid, duplicate, bad_sig = (
        value("skincare_payment_webhook_events_total", outcome=o) for o in ("paid", "duplicate", "invalid_signature")
    )
    client = Client()

    for _ in range(2):
        client.post(
            "/v1/payments/webhook",
            data=body,
            content_type="application/json",
            HTTP_X_SIGNATURE=signing.sign(body=body, secret="whsec-metrics-test"),
        )
    client.post("/v1/payments/webhook", data=body, content_type="application/json", HTTP_X_SIGNATURE="t=1,v1=00")

    assert value("skincare_payment_webhook_events_total", outcome="paid") == paid + 1
    assert value("skincare_payment_webhook_events_total", outcome="duplicate") == duplicate + 1
    assert value("skincare_payment_webhook_events_total", outcome="invalid_signature") == bad_sig + 1
    outcomes = {
        s.labels["outcome"]
        for m in REGISTRY.collect()
        if m.name == "skincare_payment_webhook_events"
        for s in m.samples
    }
    assert outcomes <= WEBHOOK_OUTCOMES | {OTHER}


def test_every_declared_error_code_is_a_checkout_and_a_webhook_label() -> None:
    """The labels are derived from the error classes: a code no list names would be counted as ``other``."""
    codes = set(declared_errors())
    assert {"sale_not_started", "sale_ended", "stock_conflict", "rate_limited", "cart_expired"} <= codes

    assert codes <= set(CHECKOUT_OUTCOMES)
    assert codes <= set(WEBHOOK_OUTCOMES)
    assert all(bounded(code, CHECKOUT_OUTCOMES) == code for code in codes)
    assert all(bounded(code, CHECKOUT_OUTCOMES) == code for code in errors.FRAMEWORK_CODES)
    assert "created" in CHECKOUT_OUTCOMES
    assert bounded("no_such_code", CHECKOUT_OUTCOMES) == OTHER  # control: anything else is still ``other``
    assert bounded(None, WEBHOOK_OUTCOMES) == OTHER


def test_webhook_success_labels_are_the_event_outcomes() -> None:
    """A 200 webhook answer's ``status`` is a ``ProcessedEvent.Outcome`` (or a Midtrans notification's ``ignored``):
    the webhook's labels name each one."""
    assert WEBHOOK_OUTCOMES.successes == set(ProcessedEvent.Outcome.values) | {IGNORED}


def test_every_code_the_api_layer_sends_is_a_framework_code() -> None:
    """The codes skincare.api writes itself (``error_body(..., "<code>")``, ``error_response(..., "<code>")`` and
    DRF's mapping) are the FRAMEWORK_CODES that the labels and the README's error table accept."""
    source = Path(api.__file__).read_text()
    sent = set(re.findall(r'error_(?:body|response)\([^()]*?(?:\([^()]*\))?[^()]*?, "([a-z_]+)"', source)) | set(
        errors.DRF_CODES.values()
    )
    assert {"internal_error", "payload_too_large", "bad_request", "not_found", "csrf_failed"} <= sent
    assert sent == errors.FRAMEWORK_CODES


@pytest.mark.django_db
@pytest.mark.parametrize(
    "starts_in, ends_in, status, code", [(60, 3600, 409, "sale_not_started"), (-60, -1, 410, "sale_ended")]
)
def test_sale_window_refusals_are_counted_under_their_own_code(  # type: ignore[no-untyped-def]
    api, make_product, starts_in, ends_in, status, code
) -> None:
    """The opening second of a sale is what the sale-window codes exist for: counted as themselves, not ``other``."""
    product = make_product(stock=5)
    set_window(product, starts_in=starts_in, ends_in=ends_in)
    before = (
        value("skincare_checkout_requests_total", outcome=code),
        value("skincare_checkout_requests_total", outcome=OTHER),
    )

    response = api.post("/v1/checkout", {"items": [{"product_id": product.pk, "qty": 1}]}, format="json")

    assert (response.status_code, response.json()["code"]) == (status, code)
    assert value("skincare_checkout_requests_total", outcome=code) == before[0] + 1
    assert value("skincare_checkout_requests_total", outcome=OTHER) == before[1]


@pytest.mark.django_db(transaction=True)
def test_a_real_deadlock_is_retried_and_counted(make_product) -> None:  # type: ignore[no-untyped-def]
    """Two transactions lock two rows in opposite orders, lined up by a barrier: PostgreSQL kills one (40P01),
    retry_transient runs it again, and skincare_db_transaction_retries_total{sqlstate="40P01"} moves by one."""
    first, second = make_product(stock=5), make_product(stock=5)
    both_hold_one = threading.Barrier(2)
    before = value("skincare_db_transaction_retries_total", sqlstate="40P01")

    def lock_in_order(ids: list[int]) -> None:
        attempt = {"n": 0}

        @retry_transient
        @transaction.atomic
        def work() -> None:
            attempt["n"] += 1
            list(StockBucket.objects.select_for_update().filter(product_id=ids[0], bucket=0))
            if attempt["n"] == 1:
                both_hold_one.wait(timeout=30)
            list(StockBucket.objects.select_for_update().filter(product_id=ids[1], bucket=0))

        work()

    outcomes = run_concurrently(2, lambda i: lock_in_order([first.pk, second.pk][:: 1 if i == 0 else -1]))

    assert [o.error for o in outcomes] == [None, None]
    assert value("skincare_db_transaction_retries_total", sqlstate="40P01") == before + 1


@pytest.mark.django_db
def test_metrics_endpoint_is_loopback_only_without_a_token(settings) -> None:  # type: ignore[no-untyped-def]
    settings.METRICS_TOKEN = ""
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="::1").get("/metrics").status_code == 200
    refused = Client(REMOTE_ADDR="203.0.113.9").get("/metrics")
    assert refused.status_code == 403
    assert refused.json()["code"] == "forbidden"


@pytest.mark.django_db
def test_metrics_endpoint_wants_the_bearer_token_when_one_is_set(settings) -> None:  # type: ignore[no-untyped-def]
    settings.METRICS_TOKEN = "scrape-token-for-tests"
    remote = Client(REMOTE_ADDR="203.0.113.9")
    assert remote.get("/metrics").status_code == 403
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 403  # the token is required everywhere
    assert remote.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    answer = remote.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-token-for-tests")
    assert answer.status_code == 200
    assert answer["Content-Type"].startswith("text/plain")
    assert b"skincare_checkout_requests_total" in answer.content


@pytest.mark.django_db(transaction=True)
def test_sweeper_counts_and_serves_its_own_metrics(settings, customer, make_product) -> None:  # type: ignore[no-untyped-def]
    product = make_product(stock=5)
    orders = [place_order(customer=customer, items=[(product.pk, 1)]) for _ in range(3)]
    for order in orders:
        make_overdue(order)
    expired, batches = value("skincare_sweeper_expired_reservations_total"), value("skincare_sweeper_batches_total")
    port = free_port()
    stop, out = threading.Event(), LineWatcher()

    thread, result = run_command_in_thread(
        loop=True, interval=3600, batch_size=2, metrics_port=port, stop_event=stop, stdout=out
    )
    try:
        assert out.seen.wait(timeout=60), "the first sweep never reported"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            served = response.read().decode()
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not thread.is_alive()
    assert result == {}

    assert value("skincare_sweeper_expired_reservations_total") == expired + 3
    assert value("skincare_sweeper_batches_total") == batches + 2
    assert value("skincare_sweeper_oldest_overdue_seconds") >= 1.0
    assert "skincare_sweeper_expired_reservations_total" in served
    assert "skincare_sweeper_oldest_overdue_seconds" in served


@pytest.mark.django_db(transaction=True)
def test_gunicorn_workers_are_summed_on_metrics(make_product, make_customer) -> None:  # type: ignore[no-untyped-def]
    """Three sync workers each count in their own mmap file; GET /metrics on any of them reports the sum."""
    product = make_product(stock=30)
    buyers = [make_customer() for _ in range(30)]
    with Gunicorn(_url(), workers=3, conn_max_age=0, extra_env={"ACCESS_LOG": "false"}) as web:
        outcomes = run_concurrently(
            30, lambda i: post_checkout(web.base, buyers[i].api_token, [{"product_id": product.pk, "qty": 1}])
        )
        assert [o.value[0] for o in outcomes] == [201] * 30  # type: ignore[index]
        with urllib.request.urlopen(f"{web.base}/metrics", timeout=10) as response:
            text = response.read().decode()
        assert len(web.worker_pids()) == 3
    samples = dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    assert float(samples['skincare_checkout_requests_total{outcome="created"}']) == 30.0
    assert float(samples["skincare_checkout_duration_seconds_count"]) == 30.0


def _url() -> str:
    """A postgres URL for the test database (the one this test run uses), for a child process."""
    settings_dict = connection.settings_dict
    host = settings_dict["HOST"]
    if host.startswith("/"):
        return f"postgres://{settings_dict['USER'] or 'postgres'}@/{settings_dict['NAME']}?host={host}"
    auth = settings_dict["USER"] + (f":{settings_dict['PASSWORD']}" if settings_dict["PASSWORD"] else "")
    return f"postgres://{auth}@{host}:{settings_dict['PORT'] or 5432}/{settings_dict['NAME']}"


# ---------------------------------------------------------------------------------------------------------------
# The token is compared whole, and the sweeper's metrics port is protected like /metrics


@pytest.mark.django_db
@pytest.mark.parametrize("given", ["", " ", "scrape", "scrape-token-for-test", "scrape-token-for-testsX"])
def test_an_empty_prefix_or_longer_bearer_token_is_refused(settings, given) -> None:  # type: ignore[no-untyped-def]
    settings.METRICS_TOKEN = "scrape-token-for-tests"
    remote = Client(REMOTE_ADDR="203.0.113.9")
    assert remote.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {given}").status_code == 403
    # Control: the whole token is let in.
    assert remote.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-token-for-tests").status_code == 200


def _scrape(port: int, header: str | None = None) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if header is not None:
        request.add_header("Authorization", header)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert b"skincare_" in answer.read()
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


@pytest.mark.django_db  # a scrape reads the waiting room's counts (waitingroom.metrics)
def test_the_sweepers_metrics_port_wants_the_token(settings) -> None:  # type: ignore[no-untyped-def]
    from skincare.metrics import start_metrics_server

    settings.METRICS_TOKEN = "scrape-token-for-tests"
    server, _thread = start_metrics_server(0, addr="127.0.0.1")
    try:
        port = server.server_port
        assert _scrape(port) == 403
        assert _scrape(port, "Bearer ") == 403
        assert _scrape(port, "Bearer scrape") == 403
        assert _scrape(port, "Bearer scrape-token-for-tests") == 200
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.django_db  # a scrape reads the waiting room's counts (waitingroom.metrics)
def test_without_a_token_the_sweepers_metrics_port_stays_on_loopback(settings) -> None:  # type: ignore[no-untyped-def]
    from django.core.management import CommandError, call_command

    from skincare.metrics import start_metrics_server

    settings.METRICS_TOKEN, settings.PRODUCTION = "", False
    with pytest.raises(ValueError, match="needs METRICS_TOKEN"):
        start_metrics_server(0, addr="0.0.0.0")  # noqa: S104 - the refusal under test
    with pytest.raises(CommandError, match="needs METRICS_TOKEN"):
        call_command("expire_reservations", "--metrics-port", "1", "--metrics-addr", "0.0.0.0")  # noqa: S104
    server, _thread = start_metrics_server(0, addr="127.0.0.1")  # control: loopback, as by default
    try:
        assert _scrape(server.server_port) == 200
    finally:
        server.shutdown()
        server.server_close()
    settings.PRODUCTION = True
    with pytest.raises(ValueError, match="always in production"):
        start_metrics_server(0, addr="127.0.0.1")
