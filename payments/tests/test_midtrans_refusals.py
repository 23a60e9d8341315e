"""Each refusal of the Midtrans integration tested by itself, where the status API's confirmation or a later check
would otherwise hide it: the notification's signature (computed here from Midtrans's documented formula,
SHA-512 of order_id + status_code + gross_amount + server key, independently of the code under test), a status answer
about another transaction, an expire the gateway refused, a notification for a transaction the gateway does not
know yet, the payment page's claim, and reconciliation's currency."""

import hashlib
import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client

from checkout.testing import place_order
from payments.exceptions import GatewayUnavailable, InvalidSignature
from payments.midtrans import MidtransGateway
from payments.models import GatewayTransaction, PaymentSession, ProcessedEvent
from payments.tests.test_midtrans import notify, open_session, pay_link, state
from skincare.demo import TEST_MIDTRANS_SERVER_KEY

ORDER_ID, STATUS_CODE, GROSS = "42-0a1b2c3d", "200", "129000.00"


def documented_signature(
    *, order_id=ORDER_ID, status_code=STATUS_CODE, gross_amount=GROSS, key=TEST_MIDTRANS_SERVER_KEY
):
    return hashlib.sha512((order_id + status_code + gross_amount + key).encode("utf-8")).hexdigest()


def notification(signature_key):
    body = {"order_id": ORDER_ID, "status_code": STATUS_CODE, "gross_amount": GROSS, "signature_key": signature_key}
    return json.dumps(body).encode()


def midtrans(server_key=TEST_MIDTRANS_SERVER_KEY, base_url="https://api.sandbox.midtrans.com"):
    return MidtransGateway(server_key=server_key, snap_base_url=base_url, api_base_url=base_url, timeout=0.5)


# The signature


def test_a_notification_signed_by_the_documented_formula_is_read():
    assert midtrans().notification_read(body=notification(documented_signature()), headers={}) == ORDER_ID
    upper = documented_signature().upper()  # hex in either case
    assert midtrans().notification_read(body=notification(upper), headers={}) == ORDER_ID


@pytest.mark.parametrize("length", [0, 1, 64, 127])
def test_a_prefix_of_the_right_signature_is_refused(length):
    with pytest.raises(InvalidSignature):
        midtrans().notification_read(body=notification(documented_signature()[:length]), headers={})


def test_a_digest_without_the_status_code_is_refused():
    without = hashlib.sha512((ORDER_ID + GROSS + TEST_MIDTRANS_SERVER_KEY).encode()).hexdigest()
    with pytest.raises(InvalidSignature):
        midtrans().notification_read(body=notification(without), headers={})


def test_an_empty_server_key_verifies_nothing():
    """A shop without a key must not accept the digest anyone can compute over an empty key."""
    with pytest.raises(InvalidSignature, match="not configured"):
        midtrans(server_key="").notification_read(body=notification(documented_signature(key="")), headers={})


# Answers about something else, and refusals


def test_a_status_answer_about_another_transaction_is_no_answer(fake):
    fake.pay(gateway_order_id=ORDER_ID, gross_amount=GROSS)
    fake.transactions[ORDER_ID]["order_id"] = "43-ffffffff"  # the gateway answered about another transaction
    with pytest.raises(GatewayUnavailable, match="another order"):
        midtrans(base_url=fake.base_url).status_get(gateway_order_id=ORDER_ID)


def test_an_expire_the_gateway_refused_is_not_done(fake):
    """401 (a wrong key) is neither expired (407), absent (404) nor final (412): the transaction may still be
    payable, so the caller marks the order for reconciliation instead of believing it closed."""
    fake.pay(gateway_order_id=ORDER_ID, status="pending", gross_amount=GROSS)
    with pytest.raises(GatewayUnavailable, match="refused to expire"):
        midtrans(server_key="SB-Mid-server-wrong", base_url=fake.base_url).transaction_expire(gateway_order_id=ORDER_ID)
    assert fake.transactions[ORDER_ID]["transaction_status"] == "pending"


@pytest.mark.django_db
def test_a_notification_the_gateway_does_not_know_yet_is_retried_not_ignored(api, fake, make_product, customer):
    """Signed, for a transaction the shop issued, but the status API has no such transaction yet: 503, so Midtrans
    retries; its event is not claimed, so the retry, once the gateway knows it, pays the order."""
    order = place_order(customer=customer, items=[(make_product(stock=5, price="129000.00").pk, 1)])
    open_session(api, order)
    issued = PaymentSession.objects.get(order=order).gateway_order_id
    record = fake.pay(gateway_order_id=issued, gross_amount=order.total)
    body = fake.notification(gateway_order_id=issued)
    del fake.transactions[issued]  # the status API does not know it (yet)
    before = state()

    answer = notify(body)

    assert answer.status_code == 503 and answer.json()["code"] == "gateway_unavailable"
    assert state() == before and not ProcessedEvent.objects.exists()
    fake.transactions[issued] = record
    assert notify(body).json() == {"status": "paid", "order_id": order.pk}


# The payment page's claim


def claim_row(order, *, gateway_order_id, age_seconds):
    """A visit's claim on the order's session, left without a page (its visit is creating it, or died)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO payment_sessions (order_id, gateway, ends_at, gateway_order_id, created_at)"
            " VALUES (%s, 'midtrans', now() + interval '10 minutes', %s, now() - make_interval(secs => %s))",
            [order.pk, gateway_order_id, age_seconds],
        )
        cursor.execute(
            "INSERT INTO gateway_transactions (gateway_order_id, order_id, gateway) VALUES (%s, %s, 'midtrans')",
            [gateway_order_id, order.pk],
        )


@pytest.mark.django_db
def test_a_live_claim_is_not_taken_over(api, fake, make_product, customer):
    """Another visit claimed the session a moment ago and is asking Snap: this visit waits for its page (503), it
    does not start a second transaction."""
    order = place_order(customer=customer, items=[(make_product(stock=5, price="129000.00").pk, 1)])
    claim_row(order, gateway_order_id=f"{order.pk}-11111111", age_seconds=0)

    answer = Client().get(pay_link(api, order))

    assert answer.status_code == 503 and answer.json()["code"] == "gateway_unavailable"
    assert fake.snap_order_ids == []
    assert PaymentSession.objects.get(order=order).gateway_order_id == f"{order.pk}-11111111"


@pytest.mark.django_db
def test_a_claim_taken_over_names_the_new_transaction(api, fake, make_product, customer, settings):
    """A claim left by a visit that died (older than twice the gateway's timeout) is taken over by a new attempt:
    the session then names the transaction Snap was asked to create, not the dead visit's."""
    order = place_order(customer=customer, items=[(make_product(stock=5, price="129000.00").pk, 1)])
    dead = f"{order.pk}-22222222"
    claim_row(order, gateway_order_id=dead, age_seconds=10 * settings.MIDTRANS_TIMEOUT_SECONDS)

    answer = Client().get(pay_link(api, order))

    assert answer.status_code == 302
    [asked] = fake.snap_order_ids
    assert asked != dead and PaymentSession.objects.get(order=order).gateway_order_id == asked
    assert set(GatewayTransaction.objects.filter(order=order).values_list("gateway_order_id", flat=True)) == {
        dead,
        asked,
    }


# Reconciliation


@pytest.mark.django_db
def test_reconcile_sees_a_settlement_in_another_currency(api, fake, make_product, customer):
    order = place_order(customer=customer, items=[(make_product(stock=5, price="129000.00").pk, 1)])
    open_session(api, order)
    fake.pay(order.pk, gross_amount=order.total)
    assert notify(fake.notification(order.pk)).json()["status"] == "paid"
    fake.pay(order.pk, gross_amount=order.total, currency="USD")  # the same number, another currency

    out = StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("reconcile_payments", stdout=out)

    assert exited.value.code == 1
    assert f"order {order.pk}: amount_differs" in out.getvalue() and "USD" in out.getvalue()
