"""The development payment sandbox: off by default; when on, its buttons send a real signed webhook to this
service from one delivery thread per process, exactly like a gateway calling back; each button acts once, and only
on a pending order."""

import contextlib
import logging
import re
import threading
import time
from datetime import timedelta

import pytest
import requests
from django.core import signing as django_signing
from django.test import Client, RequestFactory

from checkout.testing import place_order
from devtools.testing import assert_invariants
from orders.models import Order
from payments import links, sandbox, services
from payments.models import PaymentAttempt, ProcessedEvent
from skincare.db import db_now

SECRET = "whsec-sandbox-test"


def sandbox_path(order, *, until=None):
    """The signed, expiring link that checkout hands out in ``payment_url`` (``until``: another deadline)."""
    order.refresh_from_db()
    until = until or order.payment_expires_at
    return sandbox.sandbox_path(order_id=order.pk, customer_id=order.customer_id, until=until)


def csrf_post(session, url, data):
    """A browser's press of a button: load the page (CSRF cookie + token in the form), then post the form."""
    page = session.get(url, timeout=10)
    assert page.status_code == 200, page.text
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    return session.post(url, data={**data, "csrfmiddlewaretoken": token}, allow_redirects=False, timeout=10)


@pytest.fixture
def order(make_product, customer):
    product = make_product(stock=5, price="19.90")
    return place_order(customer=customer, items=[(product.pk, 2)])


@pytest.fixture
def sandbox_on(settings):
    settings.PAYMENT_SANDBOX = True
    settings.PAYMENT_WEBHOOK_SECRET = SECRET
    return settings


@pytest.fixture
def live_sandbox(sandbox_on, live_server):
    """The sandbox posts to the fixed PAYMENT_SANDBOX_WEBHOOK_URL: here, the live test server's webhook."""
    sandbox_on.PAYMENT_SANDBOX_WEBHOOK_URL = live_server.url + "/v1/payments/webhook"
    return live_server


class DeliveryWatcher(logging.Handler):
    """Sets ``done`` when the sandbox's background thread logs the end of a webhook delivery (either way)."""

    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.done = threading.Event()
        self.messages = []

    def emit(self, record):
        message = record.getMessage()
        if message.startswith("sandbox webhook deliver"):
            self.messages.append(message)
            self.done.set()


@contextlib.contextmanager
def watch_delivery():
    logger = logging.getLogger("payments.sandbox")
    watcher = DeliveryWatcher()
    previous_level = logger.level
    logger.addHandler(watcher)
    logger.setLevel(logging.INFO)
    try:
        yield watcher
    finally:
        logger.removeHandler(watcher)
        logger.setLevel(previous_level)


@pytest.mark.django_db
def test_disabled_sandbox_is_404(order, settings):
    settings.PAYMENT_SANDBOX = False
    client = Client()

    page = client.get(sandbox_path(order))
    press = client.post(sandbox_path(order), {"action": "pay"})

    assert page.status_code == 404
    assert page.json() == {"error": "Not found.", "code": "not_found"}
    assert press.status_code == 404
    assert Order.objects.get(pk=order.pk).status == "pending_payment"


@pytest.mark.django_db
def test_enabled_sandbox_shows_the_order(order, sandbox_on):
    response = Client().get(sandbox_path(order))

    assert response.status_code == 200
    html = response.content.decode()
    assert f"Order #{order.pk}" in html
    assert "<strong>pending_payment</strong>" in html
    assert "39.80" in html
    assert 'value="pay"' in html and 'value="fail"' in html
    assert Client().get(f"/v1/payments/sandbox/{order.pk}").status_code == 404  # a bare order id is no link


@pytest.mark.django_db
def test_unknown_action_is_400_and_sends_nothing(order, sandbox_on):
    with watch_delivery() as watcher:
        response = Client().post(sandbox_path(order), {"action": "refund"})

    assert response.status_code == 400
    assert "Unknown action." in response.content.decode()
    assert watcher.messages == []
    assert ProcessedEvent.objects.count() == 0
    assert PaymentAttempt.objects.get(order=order).status == "pending"


@pytest.mark.django_db(transaction=True)
def test_pay_button_delivers_a_signed_webhook_that_pays_the_order(order, live_sandbox):
    path = sandbox_path(order)
    url = live_sandbox.url + path

    with watch_delivery() as watcher:
        pressed = csrf_post(requests.Session(), url, {"action": "pay"})
        assert pressed.status_code == 302
        assert pressed.headers["Location"] == path + "?sent=pay"
        assert watcher.done.wait(timeout=30), "the sandbox never finished delivering its webhook"

    assert len(watcher.messages) == 1
    assert watcher.messages[0].startswith("sandbox webhook delivered: 200"), watcher.messages
    order.refresh_from_db()
    assert order.status == "paid"
    assert set(order.reservations.values_list("status", flat=True)) == {"consumed"}
    attempt = PaymentAttempt.objects.get(order=order)
    assert (attempt.status, attempt.received_amount, attempt.provider_reference) == (
        "succeeded",
        order.total,
        f"sandbox-{order.pk}",
    )
    event = ProcessedEvent.objects.get()
    assert event.event_id.startswith("sandbox-")
    assert (event.event_type, event.order_id, event.outcome) == ("payment.succeeded", order.pk, "paid")

    page = requests.get(url, timeout=10)
    assert page.status_code == 200
    assert "<strong>paid</strong>" in page.text
    assert "succeeded" in page.text
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_fail_button_records_a_failed_attempt_and_keeps_the_order(order, live_sandbox):
    url = live_sandbox.url + sandbox_path(order)

    with watch_delivery() as watcher:
        pressed = csrf_post(requests.Session(), url, {"action": "fail"})
        assert pressed.status_code == 302
        assert watcher.done.wait(timeout=30), "the sandbox never finished delivering its webhook"

    assert watcher.messages[0].startswith("sandbox webhook delivered: 200"), watcher.messages
    order.refresh_from_db()
    assert order.status == "pending_payment"
    assert PaymentAttempt.objects.get(order=order).status == "failed"
    assert ProcessedEvent.objects.get().outcome == "failed"
    assert_invariants()


@pytest.mark.django_db
def test_sandbox_without_a_webhook_secret_says_so_and_sends_nothing(client, settings, make_product, customer):
    settings.PAYMENT_SANDBOX = True
    settings.PAYMENT_WEBHOOK_SECRET = ""
    product = make_product(stock=3)
    order = place_order(customer=customer, items=[(product.pk, 1)])

    response = client.post(sandbox_path(order), {"action": "pay"})

    assert response.status_code == 409
    assert "PAYMENT_WEBHOOK_SECRET is not set" in response.content.decode()
    order.refresh_from_db()
    assert order.status == "pending_payment"
    assert not order.payment_attempts.exclude(status="pending").exists()


# --------------------------------------------------------------------------------------------------------------
# Abuse: only the caller's own order, CSRF, a fixed webhook address (docs/reliability.md)


@pytest.fixture
def deliveries(monkeypatch):
    """Record the sandbox's webhook deliveries instead of sending them."""
    sent = []
    monkeypatch.setattr(
        sandbox, "_dispatch", lambda url, body, signature, event_id: sent.append((url, body, signature))
    )
    return sent


@pytest.mark.django_db
def test_checkout_payment_url_is_a_signed_link_to_the_callers_own_order(api, make_product, sandbox_on):
    product = make_product(stock=3)

    body = api.post("/v1/checkout", {"items": [{"product_id": product.pk, "qty": 1}]}, format="json").json()

    path = body["payment_url"].removeprefix("http://testserver")
    assert path.startswith("/v1/payments/sandbox/")
    assert path != f"/v1/payments/sandbox/{body['order_id']}"  # a signed link, not a guessable id
    page = Client().get(path)
    assert page.status_code == 200
    assert f"Order #{body['order_id']}" in page.content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "link",
    [
        "bare order id",
        "tampered signature",
        "someone else's order",
        "expired link",
        "another salt",
        "not a dict",
        "no deadline",
    ],
)
def test_sandbox_links_act_only_on_the_callers_own_order(order, sandbox_on, make_customer, deliveries, link):
    stranger = make_customer()
    until = order.payment_expires_at
    token = sandbox.sandbox_link_token(order_id=order.pk, customer_id=order.customer_id, until=until)
    claims = {"order": order.pk, "customer": order.customer_id, "until": int(until.timestamp())}
    paths = {
        "bare order id": f"/v1/payments/sandbox/{order.pk}",
        "tampered signature": f"/v1/payments/sandbox/{token[:-2]}xx",
        "someone else's order": "/v1/payments/sandbox/"
        + sandbox.sandbox_link_token(order_id=order.pk, customer_id=stranger.pk, until=until),
        "expired link": sandbox_path(order, until=db_now() - timedelta(seconds=links.LINK_GRACE_SECONDS + 1)),
        "another salt": "/v1/payments/sandbox/" + django_signing.Signer(salt="other").sign_object(claims),
        "not a dict": "/v1/payments/sandbox/" + django_signing.Signer(salt=sandbox.LINK_SALT).sign_object([order.pk]),
        "no deadline": "/v1/payments/sandbox/"
        + django_signing.Signer(salt=sandbox.LINK_SALT).sign_object({**claims, "until": None}),
    }

    page = Client().get(paths[link])
    press = Client().post(paths[link], {"action": "pay"})

    assert (page.status_code, press.status_code) == (404, 404)
    assert press.json()["code"] == "not_found"
    assert deliveries == []
    assert PaymentAttempt.objects.get(order=order).status == "pending"


@pytest.mark.django_db
def test_sandbox_form_needs_its_csrf_token(order, sandbox_on, deliveries):
    browser = Client(enforce_csrf_checks=True)
    path = sandbox_path(order)

    forged = browser.post(path, {"action": "pay"})  # e.g. a cross-site form: no token
    page = browser.get(path)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode()).group(1)
    pressed = browser.post(path, {"action": "pay", "csrfmiddlewaretoken": token})

    assert forged.status_code == 403
    assert pressed.status_code == 302
    assert len(deliveries) == 1  # only the press with the token sent anything


@pytest.mark.django_db
def test_sandbox_posts_to_the_fixed_webhook_url_whatever_the_host_header(order, sandbox_on, deliveries):
    sandbox_on.PAYMENT_SANDBOX_WEBHOOK_URL = "http://127.0.0.1:8123/v1/payments/webhook"
    sandbox_on.ALLOWED_HOSTS = ["*"]  # even a host the operator allowed by mistake is not used

    pressed = Client(HTTP_HOST="attacker.example").post(sandbox_path(order), {"action": "pay"})

    assert pressed.status_code == 302
    assert [url for url, _body, _signature in deliveries] == ["http://127.0.0.1:8123/v1/payments/webhook"]


def test_sandbox_refuses_to_start_without_debug_unless_opted_in(settings):
    from django.core.checks import Error

    from payments import checks

    settings.PAYMENT_SANDBOX, settings.DEBUG, settings.PAYMENT_SANDBOX_ALLOW_WITHOUT_DEBUG = True, False, False
    errors = checks.sandbox_only_in_development()
    assert [(type(e), e.id) for e in errors] == [(Error, "payments.E002")]

    settings.PAYMENT_SANDBOX_ALLOW_WITHOUT_DEBUG = True  # the Makefile's demo-only opt-in
    assert checks.sandbox_only_in_development() == []
    settings.PAYMENT_SANDBOX_ALLOW_WITHOUT_DEBUG, settings.DEBUG = False, True
    assert checks.sandbox_only_in_development() == []
    settings.PAYMENT_SANDBOX, settings.DEBUG = False, False
    assert checks.sandbox_only_in_development() == []


# --------------------------------------------------------------------------------------------------------------
# Once, only on a pending order, no thread per press, the link kept out of the logs (docs/reliability.md)


@pytest.mark.django_db(transaction=True)
def test_a_second_press_shows_the_outcome_and_sends_nothing(order, live_sandbox):
    url = live_sandbox.url + sandbox_path(order)
    browser = requests.Session()
    with watch_delivery() as watcher:
        assert csrf_post(browser, url, {"action": "pay"}).status_code == 302
        assert watcher.done.wait(timeout=30), "the sandbox never finished delivering its webhook"

        again = csrf_post(browser, url, {"action": "pay"})

    assert again.status_code == 409
    assert "Nothing sent: this order is already paid." in again.text
    assert "<strong>paid</strong>" in again.text
    assert len(watcher.messages) == 1
    assert list(ProcessedEvent.objects.values_list("event_id", "outcome")) == [(f"sandbox-{order.pk}-pay", "paid")]
    assert list(PaymentAttempt.objects.filter(order=order).values_list("status", flat=True)) == ["succeeded"]
    assert_invariants()


@pytest.mark.django_db
def test_a_cancelled_or_expired_order_is_not_paid_from_the_sandbox(
    order, sandbox_on, deliveries, make_product, customer
):
    from devtools.testing import make_overdue
    from orders import services as order_services

    order_services.order_cancel(customer=customer, order_id=order.pk)
    cancelled = Client().post(sandbox_path(order), {"action": "pay"})
    overdue = place_order(customer=customer, items=[(make_product(stock=1).pk, 1)])
    make_overdue(overdue)  # still pending_payment (no sweep yet), but its window closed by the database clock
    late = Client().post(sandbox_path(overdue), {"action": "pay"})

    assert cancelled.status_code == 409
    assert "Nothing sent: this order is already cancelled." in cancelled.content.decode()
    assert late.status_code == 409
    assert "payment window of this order has closed" in late.content.decode()
    assert deliveries == []
    assert not PaymentAttempt.objects.filter(status="refund_required").exists()


@pytest.mark.django_db
def test_control_the_event_a_press_sent_before_the_fix_makes_a_refund_required(order, customer):
    """What the sandbox used to send for a cancelled order: a payment the shop must refund by hand."""
    from orders import services as order_services

    order_services.order_cancel(customer=customer, order_id=order.pk)
    outcome = services.payment_event_apply(
        event_id="sandbox-old",
        event_type=services.EVENT_SUCCEEDED,
        order_id=order.pk,
        amount=order.total,
        currency=order.currency,
    )
    assert outcome == "refund_required"


def presses_at_once(order, count, monkeypatch):
    """``count`` presses of Pay at the same moment (threads with their own connections), while the delivery thread
    is held; returns the press statuses and the deliveries that were queued."""
    from devtools.testing import run_concurrently

    delivered, release = [], threading.Event()

    def held_delivery(url, body, signature):
        assert release.wait(timeout=30)
        delivered.append(body)

    monkeypatch.setattr(sandbox, "_deliver", held_delivery)
    try:
        outcomes = run_concurrently(count, lambda i: Client().post(sandbox_path(order), {"action": "pay"}).status_code)
    finally:
        release.set()
    assert [o.error for o in outcomes if o.error] == []
    sandbox._EXECUTOR.submit(lambda: None).result(timeout=30)  # the single delivery thread has drained its queue
    return [o.value for o in outcomes], delivered


@pytest.mark.django_db(transaction=True)
def test_presses_at_once_queue_one_delivery_on_one_thread(order, sandbox_on, monkeypatch):
    before = {t.name for t in threading.enumerate()}

    statuses, delivered = presses_at_once(order, 8, monkeypatch)

    assert statuses == [302] * 8  # each press shows the page; the event is on its way
    assert len(delivered) == 1
    assert f'"event_id": "sandbox-{order.pk}-pay"'.encode() in delivered[0]
    new = {t.name for t in threading.enumerate()} - before
    assert all(name.startswith("sandbox-webhook") for name in new) and len(new) <= 1, new


@pytest.mark.django_db(transaction=True)
def test_control_without_the_in_flight_claim_every_press_queues_a_delivery(order, sandbox_on, monkeypatch):
    class Forgetful(set):
        def add(self, item):  # the claim is never recorded
            pass

    monkeypatch.setattr(sandbox, "_in_flight", Forgetful())
    statuses, delivered = presses_at_once(order, 8, monkeypatch)
    assert statuses == [302] * 8
    assert len(delivered) == 8


@pytest.mark.django_db
def test_the_signed_link_never_reaches_the_access_log(order, sandbox_on, deliveries, caplog):
    from gunicorn.config import Config

    from skincare.logs import RedactingGunicornLogger

    caplog.set_level(logging.INFO, logger="skincare.access")
    path = sandbox_path(order)
    token = path.rsplit("/", 1)[-1]
    Client().get(path)
    Client().post(path, {"action": "pay"})

    lines = [r for r in caplog.records if r.name == "skincare.access"]
    assert [r.path for r in lines] == ["/v1/payments/sandbox/<redacted>"] * 2
    assert all(token not in r.getMessage() for r in lines)

    class Response:  # what gunicorn hands its access logger
        status, sent, headers = "302 Found", 0, [("Location", path + "?sent=pay")]

    environ = {
        "REQUEST_METHOD": "POST",
        "RAW_URI": path,
        "PATH_INFO": path,
        "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_REFERER": "http://shop.example" + path,
    }
    import datetime

    atoms = RedactingGunicornLogger(Config()).atoms(
        Response(), [("Referer", environ["HTTP_REFERER"])], environ, datetime.timedelta(0)
    )
    assert token not in repr(atoms)
    assert atoms["r"] == "POST /v1/payments/sandbox/<redacted> HTTP/1.1"
    assert atoms["f"] == "http://shop.example/v1/payments/sandbox/<redacted>"


def test_log_records_that_print_the_path_are_redacted() -> None:
    """Django's own loggers print ``request.path`` (a CSRF refusal, a 500): the console handler's filter redacts."""
    from skincare.logs import RedactSecretPathsFilter

    record = logging.LogRecord(
        "django.security.csrf",
        logging.WARNING,
        __file__,
        1,
        "Forbidden (%s): %s",
        ("CSRF token missing.", "/v1/payments/sandbox/abc:def"),
        None,
    )
    record.request = RequestFactory().post("/v1/payments/sandbox/abc:def")  # an extra field Django adds
    assert RedactSecretPathsFilter().filter(record)
    assert record.getMessage() == "Forbidden (CSRF token missing.): /v1/payments/sandbox/<redacted>"
    assert record.request == "<WSGIRequest: POST '/v1/payments/sandbox/<redacted>'>"


def test_gunicorns_error_log_is_redacted_too() -> None:
    """gunicorn's own error log (``Error handling request <uri>``, a traceback that quotes the link) is redacted
    like its access log."""
    from gunicorn.config import Config

    from skincare.logs import RedactingGunicornLogger

    path = "/v1/payments/sandbox/secret-link-token:sig"
    logger = RedactingGunicornLogger(Config())
    seen: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(logging.Formatter("%(message)s").format(record))

    handler = Collect()
    logger.error_log.addHandler(handler)
    try:
        logger.error("Error handling request %s", path)
        try:
            raise RuntimeError(f"worker timeout while serving {path}")
        except RuntimeError:
            logger.exception("Error handling request %s", path)
    finally:
        logger.error_log.removeHandler(handler)
    assert len(seen) == 2
    assert all("secret-link-token" not in line for line in seen), seen
    assert "Error handling request /v1/payments/sandbox/<redacted>" in seen[0]
    assert "worker timeout while serving /v1/payments/sandbox/<redacted>" in seen[1]  # the traceback's text


@pytest.mark.django_db
@pytest.mark.parametrize("pages", ["sandbox_on", "xendit"])
def test_every_answer_that_shows_the_order_shows_the_same_link(request, api, order, pages, monkeypatch):
    """The link names nothing that changes while the order is pending, so it does not depend on when it was signed:
    an idempotent checkout's replay is the first answer, byte for byte (control: a timestamped link differs)."""
    request.getfixturevalue(pages)
    first = api.get(f"/v1/orders/{order.pk}").json()["payment_url"]
    later = time.time() + 5
    monkeypatch.setattr(django_signing.time, "time", lambda: later)  # the clock a timestamped signature reads

    assert api.get(f"/v1/orders/{order.pk}").json()["payment_url"] == first
    timestamped = django_signing.dumps({"order": order.pk}, salt=sandbox.LINK_SALT)  # control: signed at "later"
    monkeypatch.undo()
    assert django_signing.dumps({"order": order.pk}, salt=sandbox.LINK_SALT) != timestamped
