"""Xendit behind the gateway seam, against the local fake of its Invoice API (``devtools/fake_xendit.py``): what is
Xendit's own (an invoice named by the shop's external_id and lasting a duration, a callback verified by a token in a
header, replays with the same and a new webhook-id, a callback the API does not confirm, a 429, a lost answer, a call
that times out) and its start-up checks. What every gateway guarantees is in ``test_gateway_seam.py``."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from checkout.testing import place_order
from devtools.fake_xendit import FakeXendit
from devtools.testing import assert_invariants, make_overdue, run_concurrently
from orders.models import Order
from payments import checks
from payments.models import GatewayTransaction, PaymentAttempt, PaymentSession, ProcessedEvent, UnmatchedPayment
from payments.xendit import XenditGateway
from skincare.demo import TEST_XENDIT_CALLBACK_TOKEN, TEST_XENDIT_SECRET_KEY

URL = "/v1/payments/xendit/notification"
MARGIN = 180


@pytest.fixture
def fake(xendit):
    return xendit


@pytest.fixture
def order(make_product, customer):
    product = make_product(stock=5, price="129000.00")
    return place_order(customer=customer, items=[(product.pk, 1)])


def page(api, order):
    link = api.get(f"/v1/orders/{order.pk}").json()["payment_url"].removeprefix("http://testserver")
    return Client().get(link)


def external_id(order) -> str:
    return PaymentSession.objects.get(order=order).gateway_order_id


def post(headers: dict[str, str], body: bytes):
    extra = {f"HTTP_{name.upper().replace('-', '_')}": value for name, value in headers.items()}
    extra.pop("HTTP_CONTENT_TYPE", None)
    return Client().post(URL, data=body, content_type="application/json", **extra)


def sweep() -> str:
    out = StringIO()
    call_command("expire_reservations", stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_the_invoice_is_named_by_the_attempt_and_ends_the_margin_before_the_deadline(api, fake, order):
    answer = page(api, order)

    assert answer.status_code == 302
    [invoice] = fake.invoices.values()
    assert answer["Location"] == invoice["invoice_url"]
    assert invoice["external_id"] == external_id(order) and invoice["external_id"].startswith(f"{order.pk}-")
    assert (invoice["amount"], invoice["currency"]) == (129000, "IDR")
    assert GatewayTransaction.objects.filter(gateway_order_id=invoice["external_id"], order=order).exists()
    session = PaymentSession.objects.get(order=order)
    assert session.token == invoice["id"]
    order.refresh_from_db()
    assert session.ends_at == order.payment_expires_at - timedelta(seconds=MARGIN)


@pytest.mark.django_db
@pytest.mark.parametrize("token", ["", "wrong", TEST_XENDIT_CALLBACK_TOKEN[:-1], TEST_XENDIT_CALLBACK_TOKEN + "x"])
def test_a_wrong_or_missing_token_changes_nothing_and_asks_nothing(api, fake, order, token):
    page(api, order)
    fake.pay(external_id(order))
    headers, body = fake.callback(fake.invoice_for(external_id(order)))
    asked = len(fake.requests)

    answer = post({**headers, "x-callback-token": token}, body)
    without = post({k: v for k, v in headers.items() if k != "x-callback-token"}, body)

    for refused in (answer, without):
        assert (refused.status_code, refused.json()["code"]) == (401, "invalid_signature")
    assert len(fake.requests) == asked
    order.refresh_from_db()
    assert order.status == Order.Status.PENDING_PAYMENT
    assert post(headers, body).json()["status"] == "paid"  # control: the account's token


@pytest.mark.django_db
def test_replays_with_the_same_and_a_new_webhook_id_apply_once(api, fake, order):
    page(api, order)
    fake.pay(external_id(order))
    invoice = fake.invoice_for(external_id(order))
    headers, body = fake.callback(invoice, webhook_id="wh-1")

    answers = [post(headers, body), post(headers, body), post(*fake.callback(invoice, webhook_id="wh-2"))]

    assert [a.json()["status"] for a in answers] == ["paid", "duplicate", "duplicate"]
    assert PaymentAttempt.objects.get(order=order).status == "succeeded"
    assert ProcessedEvent.objects.filter(order_id=order.pk).count() == 1
    assert_invariants()


@pytest.mark.django_db
def test_paid_then_settled_pays_once(api, fake, order):
    page(api, order)
    paid = fake.pay(external_id(order))
    assert post(*fake.callback(paid)).json()["status"] == "paid"
    settled = fake.pay(external_id(order), status="SETTLED")

    assert post(*fake.callback(settled)).json()["status"] == "already_paid"  # the same charge, recorded once
    assert list(PaymentAttempt.objects.filter(order=order).values_list("status", flat=True)) == ["succeeded"]
    assert_invariants()


@pytest.mark.django_db
def test_a_paid_callback_the_api_does_not_confirm_records_no_money(api, fake, order):
    page(api, order)
    invoice = fake.invoice_for(external_id(order))  # still PENDING at Xendit

    answer = post(*fake.callback(invoice, status="PAID", paid_amount=129000))

    assert answer.json()["status"] == "ignored"
    order.refresh_from_db()
    assert order.status == Order.Status.PENDING_PAYMENT


@pytest.mark.django_db
def test_a_callback_for_an_id_the_shop_never_issued_pays_nothing(api, fake, order):
    page(api, order)
    now = datetime.now(UTC)
    # Another invoice on the account, named by a bare order id (never an id this shop issues), paid in full.
    XenditGateway.from_settings().session_create(
        order_id=order.pk,
        gateway_order_id=str(order.pk),
        amount=order.total,
        currency="IDR",
        now=now,
        ends_at=now + timedelta(hours=1),
    )
    foreign = fake.pay(str(order.pk), amount=int(order.total))

    answer = post(*fake.callback(foreign))

    assert answer.json() == {"status": "unmatched", "order_id": None}
    order.refresh_from_db()
    assert (
        order.status == Order.Status.PENDING_PAYMENT and not PaymentAttempt.objects.exclude(status="pending").exists()
    )
    assert UnmatchedPayment.objects.filter(gateway="xendit", gateway_order_id=str(order.pk)).count() == 1


@pytest.mark.django_db
def test_another_currency_is_flagged_and_never_pays(api, fake, order):
    page(api, order)
    fake.pay(external_id(order), currency="USD")

    assert post(*fake.callback(fake.invoice_for(external_id(order)))).json()["status"] == "currency_mismatch"
    order.refresh_from_db()
    assert order.status == Order.Status.PENDING_PAYMENT


@pytest.mark.django_db
def test_a_429_is_a_503_with_the_wait_and_the_next_visit_creates_one_invoice(api, fake, order, settings):
    fake.limit_per_second = 0  # every call refused for the rate limit
    settings.GATEWAY_BREAKER_FAILURES = 1

    refused = page(api, order)

    assert (refused.status_code, refused.json()["code"]) == (503, "gateway_unavailable")
    assert int(refused["Retry-After"]) >= 1
    assert not fake.invoices and not PaymentSession.objects.exists()
    fake.limit_per_second = None
    answer = page(api, order)  # not refused by the breaker: a 429 is an answer
    assert answer.status_code == 302
    assert len(fake.invoices) == 1


@pytest.mark.django_db
def test_a_lost_answer_then_a_new_visit_leaves_one_live_invoice(api, fake, order):
    fake.lose_answers = 1
    first = page(api, order)
    assert first.status_code == 503
    [lost] = fake.invoices.values()  # created there; the shop never heard of it

    second = page(api, order)

    assert second.status_code == 302
    statuses = sorted(i["status"] for i in fake.invoices.values())
    assert statuses == ["EXPIRED", "PENDING"]  # the lost attempt's invoice expired before the new one was created
    assert fake.invoices[lost["id"]]["status"] == "EXPIRED"


@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", ["create", "list"])
def test_a_call_that_does_not_answer_in_time_is_a_503_and_the_reservation_holds(api, fake, order, endpoint):
    if endpoint == "list":  # the page's own question: an earlier attempt to close first
        fake.lose_answers = 1
        assert page(api, order).status_code == 503
    fake.stalled.add(endpoint)

    answer = page(api, order)

    assert (answer.status_code, answer.json()["code"]) == (503, "gateway_unavailable")
    order.refresh_from_db()
    assert order.status == Order.Status.PENDING_PAYMENT
    assert_invariants()


def test_xendit_needs_its_key_and_token(settings):
    settings.PAYMENT_GATEWAY = "xendit"
    settings.XENDIT_SECRET_KEY, settings.XENDIT_CALLBACK_TOKEN = "xnd_production_realkey", ""
    assert [e.id for e in checks.xendit_settings()] == ["payments.E011"]
    settings.XENDIT_CALLBACK_TOKEN = "a-real-token-of-the-account"
    assert checks.xendit_settings() == []  # control: both set


def test_production_refuses_published_values_and_plain_http(settings):
    settings.PAYMENT_GATEWAY = "xendit"
    settings.PRODUCTION = True
    settings.XENDIT_SECRET_KEY, settings.XENDIT_CALLBACK_TOKEN = TEST_XENDIT_SECRET_KEY, TEST_XENDIT_CALLBACK_TOKEN
    settings.XENDIT_API_BASE_URL = "http://api.xendit.co"
    assert sorted(e.id for e in checks.xendit_settings()) == ["payments.E012", "payments.E013"]
    settings.XENDIT_SECRET_KEY, settings.XENDIT_CALLBACK_TOKEN = "xnd_production_realkey", "a-real-token-of-the-account"
    settings.XENDIT_API_BASE_URL = "https://api.xendit.co"
    assert checks.xendit_settings() == []  # control


def test_xendit_sells_in_rupiah_only(settings):
    settings.PAYMENT_GATEWAY = "xendit"
    settings.XENDIT_SECRET_KEY, settings.XENDIT_CALLBACK_TOKEN = "xnd_production_realkey", "a-real-token"
    settings.SHOP_CURRENCY = "USD"
    assert [e.id for e in checks.xendit_settings()] == ["payments.E009"]


@pytest.mark.django_db
def test_a_total_with_a_fraction_is_never_charged_rounded(api, fake, make_product, customer, settings):
    settings.PAYMENT_GATEWAY = "sandbox"  # priced before the switch to Xendit
    product = make_product(stock=5, price="129000.50")
    order = place_order(customer=customer, items=[(product.pk, 1)])
    settings.PAYMENT_GATEWAY = "xendit"

    answer = page(api, order)

    assert (answer.status_code, answer.json()["code"]) == (409, "amount_not_chargeable")
    assert not fake.invoices
    assert Decimal(order.total) == Decimal("129000.50")


@pytest.mark.django_db(transaction=True)
def test_a_paid_callback_racing_the_sweeper_has_exactly_one_outcome(make_product, customer, settings):
    """The buyer paid in time; the callback arrives at the deadline while the sweeper asks Xendit. Either the
    sweeper's recovery pays the order or the late callback flags a refund: one outcome, never both, never neither."""
    outcomes = []
    with FakeXendit(limit_per_second=None) as fake:
        settings.PAYMENT_GATEWAY = "xendit"
        settings.XENDIT_SECRET_KEY, settings.XENDIT_CALLBACK_TOKEN = TEST_XENDIT_SECRET_KEY, TEST_XENDIT_CALLBACK_TOKEN
        settings.XENDIT_API_BASE_URL = fake.base_url
        settings.XENDIT_TIMEOUT_SECONDS = 5
        settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 0
        product = make_product(stock=50, price="129000.00")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {customer.api_token}")
        for _ in range(6):
            order = place_order(customer=customer, items=[(product.pk, 1)])
            assert page(client, order).status_code == 302
            headers, body = fake.callback(fake.pay(external_id(order)))
            make_overdue(order)

            def race(i, headers=headers, body=body):
                return post(headers, body).json()["status"] if i == 0 else sweep()

            callback, sweeper = run_concurrently(2, race)

            assert callback.error is None and sweeper.error is None, (callback.error, sweeper.error)
            order.refresh_from_db()
            events = list(ProcessedEvent.objects.filter(order_id=order.pk).values_list("outcome", flat=True))
            attempts = list(PaymentAttempt.objects.filter(order=order).values_list("status", "received_amount"))
            assert len(events) == 1
            if order.status == Order.Status.PAID:
                assert events == ["paid"] and attempts == [("succeeded", order.total)]
            else:
                assert (order.status, order.cancel_reason) == ("cancelled", "payment_timeout")
                assert events == ["refund_required"] and attempts == [("refund_required", order.total)]
            outcomes.append(events[0])
            assert_invariants()
    assert set(outcomes) <= {"paid", "refund_required"}
