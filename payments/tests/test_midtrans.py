"""Midtrans behind the gateway seam, against the local fake of its API (``devtools/fake_midtrans.py``): the payment
page (one Snap session per order, closing before the reservation does), notifications (signature, status API,
replays, mismatches), the sweeper's question before it cancels, reconciliation, and the gateway not answering."""

import json
import logging
from datetime import datetime, timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection, connections, transaction
from django.test import Client

from checkout.testing import place_order
from devtools.fake_midtrans import FakeMidtrans
from devtools.testing import assert_invariants, make_overdue, run_concurrently
from inventory.models import Product
from orders.models import Order, Reservation
from payments import checks, services, sessions
from payments.exceptions import GatewayUnavailable
from payments.models import GatewayTransaction, PaymentAttempt, PaymentSession, ProcessedEvent
from skincare import metrics
from skincare.demo import TEST_MIDTRANS_SERVER_KEY

NOTIFICATION_URL = "/v1/payments/midtrans/notification"


@pytest.fixture
def order(make_product, customer):
    product = make_product(stock=5, price="129000.00")
    return place_order(customer=customer, items=[(product.pk, 1)])


def db_now():
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def set_deadline(order, seconds_from_now):
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE orders SET payment_expires_at = now() + make_interval(secs => %s) WHERE id = %s",
            [seconds_from_now, order.pk],
        )
        cursor.execute(
            "UPDATE inventory_reservations SET expires_at = now() + make_interval(secs => %s) WHERE order_id = %s",
            [seconds_from_now, order.pk],
        )
    order.refresh_from_db()


def pay_link(api, order):
    body = api.get(f"/v1/orders/{order.pk}").json()
    return body["payment_url"].removeprefix("http://testserver")


def notify(body):
    return Client().post(NOTIFICATION_URL, data=body, content_type="application/json")


def counted(outcome):
    return metrics.PAYMENT_WEBHOOK_EVENTS.labels(outcome=outcome)._value.get()


def state():
    """Everything a notification or the gateway could change."""
    return {
        "orders": list(Order.objects.order_by("id").values_list("id", "status", "cancel_reason")),
        "reservations": list(Reservation.objects.order_by("id").values_list("id", "status")),
        "attempts": list(PaymentAttempt.objects.order_by("id").values_list("id", "status", "received_amount")),
        "events": list(ProcessedEvent.objects.order_by("event_id").values_list("event_id", "outcome")),
    }


# The payment page


@pytest.mark.django_db
def test_payment_url_opens_one_snap_session_that_ends_before_the_deadline_and_is_reused(api, fake, order):
    link = pay_link(api, order)
    assert link.startswith("/v1/payments/pay/")
    assert fake.requests == []  # checkout and the order's JSON never call the gateway

    first = Client().get(link)
    second = Client().get(link)

    assert first.status_code == 302 and second.status_code == 302
    assert first["Location"] == second["Location"]
    assert first["Location"].startswith(f"{fake.base_url}/snap/v4/redirection/")
    assert len(fake.snap_requests) == 1
    sent = fake.snap_requests[0]
    gateway_order_id = PaymentSession.objects.get(order=order).gateway_order_id
    assert gateway_order_id.startswith(f"{order.pk}-")
    assert sent["transaction_details"] == {"order_id": gateway_order_id, "gross_amount": 129000}
    expiry = sent["custom_expiry"]
    assert expiry["unit"] == "minute" and sent["page_expiry"] == {
        "duration": expiry["expiry_duration"],
        "unit": "minutes",
    }
    starts = datetime.strptime(expiry["order_time"], "%Y-%m-%d %H:%M:%S %z")
    ends = starts + timedelta(minutes=expiry["expiry_duration"])
    assert ends <= order.payment_expires_at - timedelta(seconds=180)
    assert ends > order.payment_expires_at - timedelta(seconds=180 + 61)  # whole minutes, rounded down
    session = PaymentSession.objects.get(order=order)
    assert session.redirect_url == first["Location"] and session.ends_at <= order.payment_expires_at


@pytest.mark.django_db
def test_no_session_when_less_than_the_margin_is_left(api, fake, order):
    link = pay_link(api, order)
    set_deadline(order, 180 + 30)  # the margin and half a minute: no whole minute of page before the margin

    answer = Client().get(link)

    assert answer.status_code == 409 and answer.json()["code"] == "payment_window_closing"
    assert fake.requests == [] and not PaymentSession.objects.exists()


@pytest.mark.django_db
def test_no_session_for_an_order_that_is_not_pending(api, fake, order):
    link = pay_link(api, order)
    api.post(f"/v1/orders/{order.pk}/cancel")

    answer = Client().get(link)

    assert answer.status_code == 409 and answer.json()["code"] == "order_not_pending"
    assert fake.requests == []


@pytest.mark.django_db
def test_the_signed_payment_link_never_reaches_a_log(api, fake, order, caplog):
    """The link is a bearer secret for one order: the access line, Django's own records (a 503's "Service
    Unavailable: <path>") and gunicorn's access log print it redacted, as they do the sandbox's."""
    import datetime

    from gunicorn.config import Config

    from skincare.logs import RedactingGunicornLogger, RedactSecretPathsFilter

    caplog.set_level(logging.INFO)
    link = pay_link(api, order)
    token = link.rsplit("/", 1)[-1]
    fake.stall("snap")
    assert Client().get(link).status_code == 503
    fake.stalled.clear()
    assert Client().get(link).status_code == 302

    access = [r for r in caplog.records if r.name == "skincare.access" and "/payments/pay/" in r.getMessage()]
    assert [r.path for r in access] == ["/v1/payments/pay/<redacted>"] * 2
    printed = []
    for record in caplog.records:
        RedactSecretPathsFilter().filter(record)  # the console handler's filter
        printed.append(record.getMessage() + repr(getattr(record, "request", "")))
    assert any("/v1/payments/pay/<redacted>" in line for line in printed if "Service Unavailable" in line)
    assert all(token not in line for line in printed)

    class Response:
        status, sent, headers = "302 Found", 0, []

    environ = {"REQUEST_METHOD": "GET", "RAW_URI": link, "PATH_INFO": link, "SERVER_PROTOCOL": "HTTP/1.1"}
    atoms = RedactingGunicornLogger(Config()).atoms(Response(), [], environ, datetime.timedelta(0))
    assert token not in repr(atoms) and atoms["r"] == "GET /v1/payments/pay/<redacted> HTTP/1.1"


@pytest.mark.django_db
def test_a_total_with_a_fraction_is_never_charged_rounded(api, fake, make_product, customer):
    """An order placed at a price with a fraction before the shop switched to Midtrans (the catalogue refuses such
    prices now, inventory/tests/test_whole_prices.py): its payment page is 409 amount_not_chargeable and Snap is never
    asked for 129000 instead of 129000.50. Snap's int() would have truncated it."""
    product = make_product(stock=5, price="129000.00")
    Product.objects.filter(pk=product.pk).update(price=Decimal("129000.50"))  # priced before the switch
    order = place_order(customer=customer, items=[(product.pk, 1)])
    assert order.total == Decimal("129000.50")

    answer = Client().get(pay_link(api, order))

    assert answer.status_code == 409 and answer.json()["code"] == "amount_not_chargeable"
    assert answer.json()["order_id"] == order.pk
    assert fake.requests == [] and not PaymentSession.objects.exists()
    with pytest.raises(ValueError, match="whole rupiah"):
        sessions.configured_gateway().session_create(
            order_id=order.pk,
            gateway_order_id=f"{order.pk}-x",
            amount=order.total,
            currency="IDR",
            now=db_now(),
            ends_at=db_now() + timedelta(minutes=5),
        )
    assert fake.snap_requests == []


@pytest.mark.django_db
def test_a_retry_after_a_lost_snap_answer_opens_a_new_transaction(api, fake, order):
    """Snap created the first attempt's transaction but its answer was lost (the visit timed out): the next visit is
    a new attempt with its own gateway order id, which Snap accepts, and the buyer pays it. Control: Snap refuses
    the first attempt's order id a second time, as Midtrans does."""
    link = pay_link(api, order)
    fake.lose_answer()

    lost = Client().get(link)

    assert lost.status_code == 503 and lost.json()["code"] == "gateway_unavailable"
    assert not PaymentSession.objects.exists()
    [first_id] = fake.snap_order_ids
    retry = Client().get(link)
    assert retry.status_code == 302 and retry["Location"].startswith(f"{fake.base_url}/snap/v4/redirection/")
    second_id = PaymentSession.objects.get(order=order).gateway_order_id
    assert fake.snap_order_ids == [first_id, second_id] and first_id != second_id
    assert first_id.startswith(f"{order.pk}-") and second_id.startswith(f"{order.pk}-")

    fake.pay(order.pk, gross_amount=order.total)
    answer = Client().post(NOTIFICATION_URL, fake.notification(order.pk), "application/json")

    assert answer.status_code == 200 and answer.json() == {"status": "paid", "order_id": order.pk}
    with pytest.raises(GatewayUnavailable, match="already been taken"):
        sessions.configured_gateway().session_create(
            order_id=order.pk,
            gateway_order_id=first_id,
            amount=order.total,
            currency="IDR",
            now=db_now(),
            ends_at=db_now() + timedelta(minutes=5),
        )


@pytest.mark.django_db
def test_snap_not_answering_is_503_with_retry_after_and_the_reservation_holds(api, fake, order):
    link = pay_link(api, order)
    fake.stall("snap")

    answer = Client().get(link)

    assert answer.status_code == 503 and answer.json()["code"] == "gateway_unavailable"
    assert int(answer["Retry-After"]) >= 1
    assert not PaymentSession.objects.exists()  # the next visit tries again
    assert set(order.reservations.values_list("status", flat=True)) == {"active"}
    order.refresh_from_db()
    assert order.status == "pending_payment"
    fake.stalled.clear()
    assert Client().get(link).status_code == 302


@pytest.mark.django_db
def test_a_cancel_closes_the_gateway_transaction(api, fake, order):
    open_session(api, order)
    fake.pay(order.pk, gross_amount=order.total, status="pending")  # the buyer chose a bank transfer, unpaid

    assert api.post(f"/v1/orders/{order.pk}/cancel").status_code == 200

    assert fake.transactions[fake.gateway_order_id(order.pk)]["transaction_status"] == "expire"
    assert not PaymentSession.objects.get(order=order).needs_reconciliation


@pytest.mark.django_db
def test_a_cancel_while_the_gateway_is_down_still_cancels_and_is_marked(api, fake, order):
    open_session(api, order)
    fake.stall("expire")

    assert api.post(f"/v1/orders/{order.pk}/cancel").json()["status"] == "cancelled"

    assert PaymentSession.objects.get(order=order).needs_reconciliation
    assert_invariants()


# Notifications


@pytest.mark.django_db
def test_signed_settlement_pays_the_order_once_and_a_replay_changes_nothing(api, fake, order):
    open_session(api, order)  # the transaction this shop issued
    fake.pay(order.pk, gross_amount=order.total)
    body = fake.notification(order.pk)
    paid_before, duplicate_before = counted("paid"), counted("duplicate")

    first = notify(body)
    after_first = state()
    replay = notify(body)

    assert first.status_code == 200 and first.json() == {"status": "paid", "order_id": order.pk}
    assert counted("paid") == paid_before + 1 and counted("duplicate") == duplicate_before + 1
    assert replay.status_code == 200 and replay.json()["status"] == "duplicate"
    assert state() == after_first
    order.refresh_from_db()
    assert order.status == "paid"
    attempt = PaymentAttempt.objects.get(order=order)
    assert (attempt.status, attempt.received_amount, attempt.provider_reference) == (
        "succeeded",
        Decimal("129000.00"),
        fake.transactions[fake.gateway_order_id(order.pk)]["transaction_id"],
    )
    assert_invariants()


@pytest.mark.django_db
@pytest.mark.parametrize("signature_key", ["0" * 128, "not hex at all", None])
def test_a_wrong_signature_changes_nothing_and_asks_nothing(fake, order, signature_key):
    fake.pay(order.pk, gross_amount=order.total)
    body = json.loads(fake.notification(order.pk))
    if signature_key is None:
        del body["signature_key"]
    else:
        body["signature_key"] = signature_key
    before = state()

    answer = notify(json.dumps(body).encode())

    assert answer.status_code == 401 and answer.json()["code"] == "invalid_signature"
    assert state() == before
    assert fake.requests == []


@pytest.mark.django_db
@pytest.mark.parametrize("body", [b"[1, 2]", b"not json", b'{"order_id": 1}', b"\xff\xfe", b'"text"'])
def test_a_body_that_is_no_notification_is_401_and_asks_nothing(fake, order, body):
    before = state()

    answer = notify(body)

    assert answer.status_code == 401 and answer.json()["code"] == "invalid_signature"
    assert state() == before and fake.requests == []


@pytest.mark.django_db
def test_a_notification_signed_over_another_amount_is_refused(fake, order):
    fake.pay(order.pk, gross_amount=order.total)
    body = json.loads(fake.notification(order.pk))
    body["gross_amount"] = "1.00"  # the signature covers the amount
    before = state()

    answer = notify(json.dumps(body).encode())

    assert answer.status_code == 401
    assert state() == before


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("gross_amount", "currency", "outcome"),
    [("1000.00", "IDR", "amount_mismatch"), ("129000.00", "USD", "currency_mismatch")],
)
def test_money_that_does_not_match_is_recorded_for_ops_and_never_pays(
    api, fake, order, gross_amount, currency, outcome
):
    open_session(api, order)  # the transaction this shop issued
    fake.pay(order.pk, gross_amount=gross_amount, currency=currency)

    answer = notify(fake.notification(order.pk))

    assert answer.status_code == 200 and answer.json()["status"] == outcome
    order.refresh_from_db()
    assert order.status == "pending_payment"
    assert PaymentAttempt.objects.get(order=order).status == outcome
    assert_invariants()


@pytest.mark.django_db
def test_the_status_api_is_the_truth_not_the_notification(api, fake, order):
    open_session(api, order)  # the transaction this shop issued
    """A notification that says settlement while the status API says pending records no money."""
    fake.pay(order.pk, gross_amount=order.total, status="settlement")
    body = fake.notification(order.pk)
    fake.pay(order.pk, gross_amount=order.total, status="pending")

    answer = notify(body)

    assert answer.json()["status"] == "ignored"
    order.refresh_from_db()
    assert order.status == "pending_payment"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("status", "fraud_status", "outcome", "order_status"),
    [
        ("settlement", "accept", "paid", "paid"),
        ("capture", "accept", "paid", "paid"),
        ("capture", "challenge", "ignored", "pending_payment"),
        ("pending", "accept", "ignored", "pending_payment"),
        ("deny", "accept", "failed", "pending_payment"),
        ("cancel", "accept", "failed", "pending_payment"),
        ("expire", "accept", "failed", "pending_payment"),
        ("refund", "accept", "ignored", "pending_payment"),
        ("partial_refund", "accept", "ignored", "pending_payment"),
    ],
)
def test_each_status_of_the_status_api(api, fake, order, status, fraud_status, outcome, order_status):
    open_session(api, order)  # the transaction this shop issued
    fake.pay(order.pk, gross_amount=order.total, status=status, fraud_status=fraud_status)

    answer = notify(fake.notification(order.pk))

    assert answer.status_code == 200 and answer.json()["status"] == outcome
    order.refresh_from_db()
    assert order.status == order_status
    if outcome == "failed":
        assert PaymentAttempt.objects.get(order=order).status == "failed"
    assert_invariants()


@pytest.mark.django_db
def test_a_notification_after_the_deadline_flags_a_refund(api, fake, order):
    open_session(api, order)  # the transaction this shop issued
    fake.pay(order.pk, gross_amount=order.total)
    make_overdue(order)

    answer = notify(fake.notification(order.pk))

    assert answer.json()["status"] == "refund_required"
    order.refresh_from_db()
    assert (order.status, order.cancel_reason) == ("cancelled", "payment_timeout")
    assert_invariants()


@pytest.mark.django_db
def test_the_status_api_not_answering_asks_for_a_retry_and_changes_nothing(api, fake, order):
    open_session(api, order)  # the transaction this shop issued
    fake.pay(order.pk, gross_amount=order.total)
    body = fake.notification(order.pk)
    fake.stall("status")
    before = state()

    answer = notify(body)

    assert answer.status_code == 503 and answer.json()["code"] == "gateway_unavailable"
    assert state() == before
    fake.stalled.clear()
    assert notify(body).json()["status"] == "paid"  # Midtrans's retry


# The sweeper asks before it cancels


def open_session(api, order):
    assert Client().get(pay_link(api, order)).status_code == 302


def sweep():
    out = StringIO()
    call_command("expire_reservations", stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_the_sweeper_recovers_a_lost_notification(api, fake, order):
    open_session(api, order)
    fake.pay(order.pk, gross_amount=order.total)  # paid, and the notification never arrived
    make_overdue(order)

    output = sweep()

    order.refresh_from_db()
    assert order.status == "paid"
    assert "1 paid there (recovered)" in output
    assert_invariants()


@pytest.mark.django_db
def test_the_sweeper_expires_an_open_transaction_first_then_the_order(api, fake, order):
    open_session(api, order)
    fake.pay(order.pk, gross_amount=order.total, status="pending")
    make_overdue(order)

    sweep()

    assert fake.transactions[fake.gateway_order_id(order.pk)]["transaction_status"] == "expire"
    assert ("POST", f"/v2/{fake.gateway_order_id(order.pk)}/expire") in fake.requests
    order.refresh_from_db()
    assert (order.status, order.cancel_reason) == ("cancelled", "payment_timeout")
    assert_invariants()


@pytest.mark.django_db
def test_the_sweeper_expires_as_today_when_the_gateway_does_not_answer_and_marks_it(api, fake, order):
    open_session(api, order)
    fake.pay(order.pk, gross_amount=order.total, status="pending")
    make_overdue(order)
    fake.stall("status")

    output = sweep()

    order.refresh_from_db()
    assert (order.status, order.cancel_reason) == ("cancelled", "payment_timeout")
    assert PaymentSession.objects.get(order=order).needs_reconciliation
    assert "1 unanswered" in output
    assert_invariants()


@pytest.mark.django_db
def test_orders_without_a_session_expire_as_today_without_a_question(fake, order):
    make_overdue(order)

    sweep()

    order.refresh_from_db()
    assert order.status == "cancelled"
    assert fake.requests == []


@pytest.mark.django_db(transaction=True)
def test_a_settlement_notification_racing_the_sweeper_has_exactly_one_outcome(make_product, customer, settings):
    """The buyer paid in time; the notification arrives at the deadline while the sweeper asks the gateway. Either
    the sweeper's recovery pays the order or the late notification flags a refund: one outcome, never both, never
    neither, and the money is always on record."""
    outcomes = []
    with FakeMidtrans() as fake:
        settings.PAYMENT_GATEWAY = "midtrans"
        settings.MIDTRANS_SERVER_KEY = TEST_MIDTRANS_SERVER_KEY
        settings.MIDTRANS_SNAP_BASE_URL = settings.MIDTRANS_API_BASE_URL = fake.base_url
        settings.MIDTRANS_TIMEOUT_SECONDS = 5
        settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 0
        product = make_product(stock=50, price="129000.00")
        for _ in range(6):
            order = place_order(customer=customer, items=[(product.pk, 1)])
            # A session stored before attempts were numbered: the gateway knows it by the bare order id.
            PaymentSession.objects.create(order=order, gateway="midtrans", ends_at=order.payment_expires_at)
            GatewayTransaction.objects.create(gateway_order_id=str(order.pk), order=order, gateway="midtrans")
            fake.pay(order.pk, gross_amount=order.total)
            body = fake.notification(order.pk)
            make_overdue(order)

            def race(i, body=body):
                if i == 0:
                    return notify(body).json()["status"]
                return sweep()

            notification, sweeper = run_concurrently(2, race)

            assert notification.error is None and sweeper.error is None, (notification.error, sweeper.error)
            order.refresh_from_db()
            events = list(ProcessedEvent.objects.filter(order_id=order.pk).values_list("outcome", flat=True))
            attempts = list(PaymentAttempt.objects.filter(order=order).values_list("status", "received_amount"))
            assert len(events) == 1
            if order.status == "paid":
                assert events == ["paid"] and attempts == [("succeeded", order.total)]
            else:
                assert (order.status, order.cancel_reason) == ("cancelled", "payment_timeout")
                assert events == ["refund_required"] and attempts == [("refund_required", order.total)]
            outcomes.append(events[0])
            assert_invariants()
    assert set(outcomes) <= {"paid", "refund_required"}


# Reconciliation


def reconcile(*args):
    out = StringIO()
    try:
        call_command("reconcile_payments", *args, stdout=out)
    except SystemExit as exc:
        return exc.code, out.getvalue()
    return 0, out.getvalue()


@pytest.mark.django_db
def test_reconcile_shows_a_settlement_after_cancellation_as_a_refund_to_make(api, fake, order):
    open_session(api, order)
    api.post(f"/v1/orders/{order.pk}/cancel")
    fake.pay(order.pk, gross_amount=order.total)

    code, output = reconcile()

    assert code == 1
    assert f"order {order.pk}: refund_to_make" in output


@pytest.mark.django_db
def test_reconcile_shows_paid_here_not_settled_there_and_amounts_that_differ(api, fake, make_product, customer, order):
    open_session(api, order)
    fake.pay(order.pk, gross_amount=order.total)
    assert notify(fake.notification(order.pk)).json()["status"] == "paid"
    fake.pay(order.pk, gross_amount="1.00")  # the gateway's record changed after the payment

    code, output = reconcile("--since", "2000-01-01T00:00:00")

    assert code == 1
    assert f"order {order.pk}: amount_differs" in output
    fake.pay(order.pk, gross_amount=order.total, status="refund")
    code, output = reconcile()
    assert code == 1 and f"order {order.pk}: paid_not_settled: paid here, refund there" in output


@pytest.mark.django_db
def test_reconcile_is_clean_when_everything_agrees(api, fake, order):
    open_session(api, order)
    fake.pay(order.pk, gross_amount=order.total)
    notify(fake.notification(order.pk))

    code, output = reconcile()

    assert code == 0
    assert output.startswith("reconcile_payments: 0 mismatches since ")


@pytest.mark.django_db
def test_reconcile_counts_a_gateway_that_does_not_answer(api, fake, order):
    open_session(api, order)
    api.post(f"/v1/orders/{order.pk}/cancel")
    fake.stall("status")

    code, output = reconcile()

    assert code == 1 and f"order {order.pk}: unreachable" in output


@pytest.mark.django_db
def test_a_payment_link_is_404_once_the_shop_is_back_on_the_sandbox(api, fake, order, settings):
    link = pay_link(api, order)
    settings.PAYMENT_GATEWAY = "sandbox"

    assert Client().get(link).status_code == 404
    assert fake.requests == []


@pytest.mark.django_db
def test_sandbox_gateway_keeps_todays_payment_url(api, order, settings):
    settings.PAYMENT_GATEWAY = "sandbox"
    settings.PAYMENT_SANDBOX = True
    assert pay_link(api, order).startswith("/v1/payments/sandbox/")
    assert sessions.sessions_check_due(limit=10).due_by is None
    assert services.EVENT_SUCCEEDED  # the webhook's events stay the sandbox's path


# Start-up checks


def check_ids(settings, **values):
    for name, value in values.items():
        setattr(settings, name, value)
    return sorted(error.id for error in checks.midtrans_settings())


def test_midtrans_without_a_server_key_refuses_to_start(settings):
    assert check_ids(settings, PAYMENT_GATEWAY="midtrans", MIDTRANS_SERVER_KEY="") == ["payments.E006"]
    assert check_ids(settings, PAYMENT_GATEWAY="sandbox", MIDTRANS_SERVER_KEY="") == []  # control


def test_midtrans_refuses_a_shop_that_does_not_sell_in_rupiah(settings):
    midtrans = {"PAYMENT_GATEWAY": "midtrans", "MIDTRANS_SERVER_KEY": TEST_MIDTRANS_SERVER_KEY}
    assert check_ids(settings, **midtrans, SHOP_CURRENCY="USD") == ["payments.E009"]
    assert check_ids(settings, **midtrans, SHOP_CURRENCY="IDR") == []  # control


def test_production_refuses_a_published_key_and_the_sandbox_unless_asked_for(settings):
    production = {"PAYMENT_GATEWAY": "midtrans", "PRODUCTION": True, "MIDTRANS_ALLOW_SANDBOX": False}
    live = {"MIDTRANS_SNAP_BASE_URL": "https://app.midtrans.com", "MIDTRANS_API_BASE_URL": "https://api.midtrans.com"}
    own_key = "Mid-server-a-shops-own-key-0123456789"

    assert check_ids(settings, **production, **live, MIDTRANS_SERVER_KEY=TEST_MIDTRANS_SERVER_KEY) == [
        "payments.E007",
        "payments.E008",  # an SB- key is Midtrans's sandbox
    ]
    assert check_ids(
        settings,
        **production,
        MIDTRANS_SERVER_KEY=own_key,
        MIDTRANS_SNAP_BASE_URL="https://app.sandbox.midtrans.com",
        MIDTRANS_API_BASE_URL="https://api.midtrans.com",
    ) == ["payments.E008"]
    assert check_ids(settings, **production, **live, MIDTRANS_SERVER_KEY=own_key) == []  # control: a live shop
    plain = {"MIDTRANS_SNAP_BASE_URL": "http://app.midtrans.com", "MIDTRANS_API_BASE_URL": "https://api.midtrans.com"}
    assert check_ids(settings, **production, **plain, MIDTRANS_SERVER_KEY=own_key) == ["payments.E010"]
    plain = {"MIDTRANS_SNAP_BASE_URL": "https://app.midtrans.com", "MIDTRANS_API_BASE_URL": "HTTP://api.midtrans.com"}
    assert check_ids(settings, **production, **plain, MIDTRANS_SERVER_KEY=own_key) == ["payments.E010"]
    settings.MIDTRANS_SNAP_BASE_URL = "https://app.sandbox.midtrans.com"
    settings.MIDTRANS_API_BASE_URL = "https://api.sandbox.midtrans.com"
    assert check_ids(settings, MIDTRANS_ALLOW_SANDBOX=True) == []  # a staging shop asked for it


@pytest.mark.django_db
def test_the_sweeper_asks_about_every_due_order_when_there_are_more_than_a_batch(
    api, fake, make_product, customer, settings
):
    """Five due orders with sessions (one deadline shared by three), a batch of two: every one is asked about before
    it is cancelled, the paid ones are recovered, the rest expire."""
    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 0
    product = make_product(stock=10, price="129000.00")
    orders = [place_order(customer=customer, items=[(product.pk, 1)]) for _ in range(5)]
    for order in orders:
        open_session(api, order)
        make_overdue(order)  # one test transaction: every order shares the same deadline
    for order in orders[::2]:
        fake.pay(order.pk, gross_amount=order.total)

    out = StringIO()
    call_command("expire_reservations", "--batch-size", "2", stdout=out)

    statuses = {order.pk: Order.objects.get(pk=order.pk).status for order in orders}
    assert [statuses[order.pk] for order in orders] == ["paid", "cancelled", "paid", "cancelled", "paid"]
    asked = {path for method, path in fake.requests if method == "GET" and path.endswith("/status")}
    assert asked == {f"/v2/{fake.gateway_order_id(order.pk)}/status" for order in orders}
    assert_invariants()


# No network call inside a database transaction

OPEN_TRANSACTIONS_SQL = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start IS NOT NULL
  AND backend_type = 'client backend' AND state <> 'active'
"""


@pytest.mark.django_db(transaction=True)
def test_no_call_to_the_gateway_is_made_while_the_shop_holds_a_transaction(api, fake, order, settings):
    """At every request the fake receives, no other session of the test database has a transaction open and idle
    (the shop waiting on the network inside one). Control: the probe sees a transaction this test holds open."""
    seen = []

    def probe(method, path):
        with connections["default"].cursor() as cursor:
            cursor.execute(OPEN_TRANSACTIONS_SQL)
            seen.append((method, path, cursor.fetchone()[0]))
        connections["default"].close()

    fake.on_request = probe
    open_session(api, order)  # Snap
    fake.pay(order.pk, gross_amount=order.total, status="pending")
    assert notify(fake.notification(order.pk)).json()["status"] == "ignored"  # status API
    make_overdue(order)
    sweep()  # status, then expire
    assert [(method, path.split("/")[-1]) for method, path, _ in seen] == [
        ("POST", "transactions"),
        ("GET", "status"),
        ("GET", "status"),
        ("POST", "expire"),
    ]
    assert [count for *_, count in seen] == [0, 0, 0, 0]

    seen.clear()
    with transaction.atomic():  # control: a transaction held open across a call is seen
        Order.objects.select_for_update().get(pk=order.pk)
        sessions.configured_gateway().status_get(gateway_order_id=str(order.pk))
    assert [count for *_, count in seen] == [1]


@pytest.mark.django_db
def test_the_sale_report_counts_orders_expired_without_the_gateways_word(api, fake, order, tmp_path):
    product_id = order.lines.get().product_id
    open_session(api, order)
    make_overdue(order)
    fake.stall("status")
    sweep()

    out = StringIO()
    call_command("sale_report", "--product", str(product_id), "--png", str(tmp_path / "sale.png"), stdout=out)

    assert "to reconcile:    1 expired without the gateway's word" in out.getvalue()
