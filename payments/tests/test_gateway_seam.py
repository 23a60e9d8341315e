"""What every gateway behind the seam (``payments.gateway``) guarantees, run against each real gateway's local fake
(``devtools/fake_midtrans.py``, ``devtools/fake_xendit.py``): one page per order, reused and closing before the
reservation does, no call at checkout; a notification verified, confirmed with the gateway and applied once, to
the order whose transaction id the shop issued; the sweeper asking before it cancels; every cancel closing the
gateway's transaction; reconciliation; a gateway that does not answer. A new gateway gets a side here."""

from datetime import timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client

from checkout.testing import place_order
from devtools.fake_midtrans import FakeMidtrans
from devtools.fake_xendit import FakeXendit
from devtools.testing import assert_invariants, make_overdue
from orders.models import Order
from payments.models import PaymentAttempt, PaymentSession
from skincare.demo import TEST_MIDTRANS_SERVER_KEY, TEST_XENDIT_CALLBACK_TOKEN, TEST_XENDIT_SECRET_KEY

TIMEOUT = 0.5  # seconds: the shop's bound on every call to a fake
MARGIN = 180


class MidtransSide:
    name = "midtrans"
    notification_url = "/v1/payments/midtrans/notification"
    # The seam's calls -> the fake's endpoints.
    endpoints = {"create": "snap", "status": "status", "expire": "expire"}

    def __init__(self, fake: FakeMidtrans) -> None:
        self.fake = fake

    def live_id(self, order) -> str:
        return self.fake.gateway_order_id(order.pk)

    def pay(self, order, *, amount=None, open_only=False) -> None:
        self.fake.pay(
            order.pk,
            gross_amount=order.total if amount is None else amount,
            status="pending" if open_only else "settlement",
        )

    def notification(self, order, *, wrong_key=False) -> dict:
        body = self.fake.notification(order.pk, signature_key="0" * 128 if wrong_key else None)
        return {"data": body, "content_type": "application/json"}

    def expired(self, order) -> bool:
        return self.fake.transactions[self.live_id(order)]["transaction_status"] == "expire"

    def pages_created(self) -> int:
        return len(self.fake.snap_requests)

    def stall(self, call: str) -> None:
        self.fake.stall(self.endpoints[call])


class XenditSide:
    name = "xendit"
    notification_url = "/v1/payments/xendit/notification"
    endpoints = {"create": "create", "status": "list", "expire": "expire"}

    def __init__(self, fake: FakeXendit) -> None:
        self.fake = fake

    def live_id(self, order) -> str:
        return PaymentSession.objects.get(order=order).gateway_order_id

    def pay(self, order, *, amount=None, open_only=False) -> None:
        if not open_only:  # an invoice is open (PENDING) until it is paid
            self.fake.pay(self.live_id(order), amount=int(order.total if amount is None else amount))

    def notification(self, order, *, wrong_key=False) -> dict:
        headers, body = self.fake.callback(
            self.fake.invoice_for(self.live_id(order)), token="not-the-token" if wrong_key else None
        )
        extra = {f"HTTP_{name.upper().replace('-', '_')}": value for name, value in headers.items()}
        extra.pop("HTTP_CONTENT_TYPE", None)
        return {"data": body, "content_type": "application/json", **extra}

    def expired(self, order) -> bool:
        return self.fake.invoice_for(self.live_id(order))["status"] == "EXPIRED"

    def pages_created(self) -> int:
        return sum(1 for method, path in self.fake.requests if (method, path) == ("POST", "/v2/invoices"))

    def stall(self, call: str) -> None:
        self.fake.stalled.add(self.endpoints[call])


@pytest.fixture(params=["midtrans", "xendit"])
def side(request, settings):
    settings.PAYMENT_GATEWAY = request.param
    if request.param == "midtrans":
        with FakeMidtrans() as fake:
            settings.MIDTRANS_SERVER_KEY = TEST_MIDTRANS_SERVER_KEY
            settings.MIDTRANS_SNAP_BASE_URL = settings.MIDTRANS_API_BASE_URL = fake.base_url
            settings.MIDTRANS_TIMEOUT_SECONDS = TIMEOUT
            settings.MIDTRANS_EXPIRY_MARGIN_SECONDS = MARGIN
            yield MidtransSide(fake)
            fake.release.set()
    else:
        with FakeXendit(limit_per_second=None) as fake:
            settings.XENDIT_SECRET_KEY = TEST_XENDIT_SECRET_KEY
            settings.XENDIT_CALLBACK_TOKEN = TEST_XENDIT_CALLBACK_TOKEN
            settings.XENDIT_API_BASE_URL = fake.base_url
            settings.XENDIT_TIMEOUT_SECONDS = TIMEOUT
            settings.XENDIT_EXPIRY_MARGIN_SECONDS = MARGIN
            yield XenditSide(fake)
            fake.release.set()


@pytest.fixture
def order(make_product, customer):
    product = make_product(stock=5, price="129000.00")
    return place_order(customer=customer, items=[(product.pk, 1)])


def pay_link(api, order) -> str:
    return api.get(f"/v1/orders/{order.pk}").json()["payment_url"].removeprefix("http://testserver")


def open_page(api, order):
    answer = Client().get(pay_link(api, order))
    assert answer.status_code == 302, answer.content
    return answer


def notify(side, order, **kwargs):
    return Client().post(side.notification_url, **side.notification(order, **kwargs))


def sweep() -> str:
    out = StringIO()
    call_command("expire_reservations", stdout=out)
    return out.getvalue()


def reconcile() -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("reconcile_payments", stdout=out)
    except SystemExit as exc:
        return int(exc.code or 0), out.getvalue()
    return 0, out.getvalue()


@pytest.mark.django_db
def test_one_page_per_order_reused_and_none_at_checkout(api, side, order):
    assert side.pages_created() == 0  # checkout and the order's JSON never call the gateway
    first, second = open_page(api, order), open_page(api, order)

    assert first["Location"] == second["Location"]
    assert side.pages_created() == 1
    session = PaymentSession.objects.get(order=order)
    assert session.gateway == side.name and session.redirect_url == first["Location"]
    order.refresh_from_db()
    assert session.ends_at <= order.payment_expires_at - timedelta(seconds=MARGIN)


@pytest.mark.django_db
def test_a_confirmed_notification_pays_once_and_a_replay_changes_nothing(api, side, order):
    open_page(api, order)
    side.pay(order)

    first = notify(side, order)
    replay = notify(side, order)

    assert first.status_code == 200 and first.json() == {"status": "paid", "order_id": order.pk}
    assert replay.status_code == 200 and replay.json()["status"] == "duplicate"
    order.refresh_from_db()
    assert order.status == Order.Status.PAID
    attempt = PaymentAttempt.objects.get(order=order)
    assert (attempt.status, attempt.received_amount) == ("succeeded", Decimal("129000.00"))
    assert_invariants()


@pytest.mark.django_db
def test_an_unverified_notification_changes_nothing_and_asks_nothing(api, side, order):
    open_page(api, order)
    side.pay(order)
    asked = len(side.fake.requests)

    answer = notify(side, order, wrong_key=True)

    assert (answer.status_code, answer.json()["code"]) == (401, "invalid_signature")
    assert len(side.fake.requests) == asked
    order.refresh_from_db()
    assert order.status == Order.Status.PENDING_PAYMENT


@pytest.mark.django_db
def test_a_notification_to_the_other_gateways_endpoint_is_refused(api, side, order, settings):
    open_page(api, order)
    side.pay(order)
    body = side.notification(order)
    other = "/v1/payments/xendit/notification" if side.name == "midtrans" else "/v1/payments/midtrans/notification"

    answer = Client().post(other, **body)

    assert (answer.status_code, answer.json()["code"]) == (401, "invalid_signature")
    order.refresh_from_db()
    assert order.status == Order.Status.PENDING_PAYMENT
    assert Client().post(side.notification_url, **body).json()["status"] == "paid"  # control: its own endpoint


@pytest.mark.django_db
def test_a_notification_the_gateway_does_not_confirm_records_no_money(api, side, order):
    open_page(api, order)
    side.pay(order, open_only=True)  # the gateway still has it open

    answer = notify(side, order)

    assert answer.status_code == 200 and answer.json()["status"] == "ignored"
    order.refresh_from_db()
    assert (
        order.status == Order.Status.PENDING_PAYMENT and not PaymentAttempt.objects.exclude(status="pending").exists()
    )


@pytest.mark.django_db
def test_money_after_the_deadline_flags_a_refund(api, side, order):
    open_page(api, order)
    side.pay(order)
    make_overdue(order)

    assert notify(side, order).json()["status"] == "refund_required"
    order.refresh_from_db()
    assert (order.status, order.cancel_reason) == ("cancelled", "payment_timeout")
    assert_invariants()


@pytest.mark.django_db
def test_another_amount_is_flagged_and_never_pays(api, side, order):
    open_page(api, order)
    side.pay(order, amount=Decimal("1000"))

    assert notify(side, order).json()["status"] == "amount_mismatch"
    order.refresh_from_db()
    assert order.status == Order.Status.PENDING_PAYMENT
    assert_invariants()


@pytest.mark.django_db
def test_a_gateway_that_does_not_answer_the_page_is_503_and_the_reservation_holds(api, side, order):
    side.stall("create")

    answer = Client().get(pay_link(api, order))

    assert answer.status_code == 503 and answer.json()["code"] == "gateway_unavailable" and answer["Retry-After"]
    order.refresh_from_db()
    assert order.status == Order.Status.PENDING_PAYMENT
    assert_invariants()


@pytest.mark.django_db
def test_the_sweeper_recovers_a_lost_notification(api, side, order):
    open_page(api, order)
    side.pay(order)  # paid there; the notification never arrived
    make_overdue(order)

    output = sweep()

    order.refresh_from_db()
    assert order.status == Order.Status.PAID and "1 paid there (recovered)" in output
    assert_invariants()


@pytest.mark.django_db
def test_the_sweeper_expires_an_open_transaction_before_the_order(api, side, order):
    open_page(api, order)
    side.pay(order, open_only=True)
    make_overdue(order)

    sweep()

    assert side.expired(order)
    order.refresh_from_db()
    assert (order.status, order.cancel_reason) == ("cancelled", "payment_timeout")
    assert_invariants()


@pytest.mark.django_db
def test_a_cancel_closes_the_gateways_transaction(api, side, order):
    open_page(api, order)
    side.pay(order, open_only=True)

    assert api.post(f"/v1/orders/{order.pk}/cancel").status_code == 200

    assert side.expired(order)
    assert not PaymentSession.objects.get(order=order).needs_reconciliation


@pytest.mark.django_db
def test_a_cancel_while_the_gateway_is_down_still_cancels_and_is_marked(api, side, order):
    open_page(api, order)
    side.stall("status" if side.name == "xendit" else "expire")  # Xendit finds the invoice before it expires it

    assert api.post(f"/v1/orders/{order.pk}/cancel").json()["status"] == "cancelled"

    assert PaymentSession.objects.get(order=order).needs_reconciliation
    assert_invariants()


@pytest.mark.django_db
def test_reconcile_shows_money_taken_for_a_cancelled_order_as_a_refund_to_make(api, side, order):
    open_page(api, order)
    side.stall("expire" if side.name == "midtrans" else "status")
    api.post(f"/v1/orders/{order.pk}/cancel")  # the gateway did not hear the cancel
    side.fake.stalled.clear()
    side.fake.release.set()
    side.pay(order)  # and the buyer paid on the page still open

    code, output = reconcile()

    assert code == 1 and f"order {order.pk}: refund_to_make" in output
    assert PaymentSession.objects.get(order=order).needs_reconciliation  # money to return: still for a person


@pytest.mark.django_db
def test_reconcile_unmarks_an_order_once_the_gateway_answers_with_nothing_to_mend(api, side, order):
    open_page(api, order)
    side.stall("expire" if side.name == "midtrans" else "status")
    api.post(f"/v1/orders/{order.pk}/cancel")  # the gateway did not hear the cancel: marked
    assert PaymentSession.objects.get(order=order).needs_reconciliation
    side.fake.stalled.clear()
    side.fake.release.set()

    code, output = reconcile()

    assert code == 0, output
    assert not PaymentSession.objects.get(order=order).needs_reconciliation
