"""The development payment sandbox: off by default; when on, its buttons send a real signed webhook to this
service from a background thread, exactly like a gateway calling back."""

import contextlib
import logging
import threading

import pytest
import requests
from django.test import Client

from orders.models import Order
from payments import services
from payments.models import PaymentAttempt, ProcessedEvent
from skincare.testing import assert_invariants

SECRET = "whsec-sandbox-test"


def sandbox_path(order_id):
    return f"/v1/payments/sandbox/{order_id}"


@pytest.fixture
def order(make_product, customer):
    product = make_product(stock=5, price="19.90")
    return services.checkout(customer=customer, items=[(product.pk, 2)])


@pytest.fixture
def sandbox_on(settings):
    settings.PAYMENT_SANDBOX = True
    settings.PAYMENT_WEBHOOK_SECRET = SECRET
    return settings


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

    page = client.get(sandbox_path(order.pk))
    press = client.post(sandbox_path(order.pk), {"action": "pay"})

    assert page.status_code == 404
    assert page.json() == {"error": "Not found.", "code": "not_found"}
    assert press.status_code == 404
    assert Order.objects.get(pk=order.pk).status == "pending_payment"


@pytest.mark.django_db
def test_enabled_sandbox_shows_the_order(order, sandbox_on):
    response = Client().get(sandbox_path(order.pk))

    assert response.status_code == 200
    html = response.content.decode()
    assert f"Order #{order.pk}" in html
    assert "<strong>pending_payment</strong>" in html
    assert "39.80" in html
    assert 'value="pay"' in html and 'value="fail"' in html
    assert Client().get(sandbox_path(order.pk + 1000)).status_code == 404


@pytest.mark.django_db
def test_unknown_action_is_400_and_sends_nothing(order, sandbox_on):
    with watch_delivery() as watcher:
        response = Client().post(sandbox_path(order.pk), {"action": "refund"})

    assert response.status_code == 400
    assert "Unknown action." in response.content.decode()
    assert watcher.messages == []
    assert ProcessedEvent.objects.count() == 0
    assert PaymentAttempt.objects.get(order=order).status == "pending"


@pytest.mark.django_db(transaction=True)
def test_pay_button_delivers_a_signed_webhook_that_pays_the_order(order, sandbox_on, live_server):
    url = live_server.url + sandbox_path(order.pk)

    with watch_delivery() as watcher:
        pressed = requests.post(url, data={"action": "pay"}, allow_redirects=False, timeout=10)
        assert pressed.status_code == 302
        assert pressed.headers["Location"] == sandbox_path(order.pk) + "?sent=pay"
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
def test_fail_button_records_a_failed_attempt_and_keeps_the_order(order, sandbox_on, live_server):
    url = live_server.url + sandbox_path(order.pk)

    with watch_delivery() as watcher:
        pressed = requests.post(url, data={"action": "fail"}, allow_redirects=False, timeout=10)
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
    order = services.checkout(customer=customer, items=[(product.pk, 1)])

    response = client.post(f"/v1/payments/sandbox/{order.pk}", {"action": "pay"})

    assert response.status_code == 409
    assert "PAYMENT_WEBHOOK_SECRET is not set" in response.content.decode()
    order.refresh_from_db()
    assert order.status == "pending_payment"
    assert not order.payment_attempts.exclude(status="pending").exists()
