"""Hostile X-Signature headers: every malformed header is a 401 invalid_signature that changes nothing, never a 500."""

import time

import pytest

from checkout.testing import place_order
from payments import signing
from payments.tests.test_webhook import SECRET, db_state, deliver, encode, event


@pytest.fixture(autouse=True)
def webhook_settings(settings):
    settings.PAYMENT_WEBHOOK_SECRET = SECRET
    settings.PAYMENT_WEBHOOK_TOLERANCE_SECONDS = 300


@pytest.fixture
def order(make_product, customer):
    return place_order(customer=customer, items=[(make_product(stock=5, price="12.50").pk, 1)])


def _digest(body):
    return signing.sign(body=encode(body), secret=SECRET, timestamp=int(time.time())).split("v1=")[1]


HOSTILE = {
    "t overflows a float": lambda body: f"t={'9' * 400},v1={_digest(body)}",
    "t of 23 digits": lambda body: f"t=99999999999999999999999,v1={_digest(body)}",
    "t beyond int() digit limit": lambda body: f"t={'9' * 5000},v1={_digest(body)}",
    "t negative": lambda body: f"t=-{int(time.time())},v1={_digest(body)}",
    "t with plus sign": lambda body: f"t=+{int(time.time())},v1={_digest(body)}",
    "t with underscores": lambda body: f"t={int(time.time()):_},v1={_digest(body)}",
    "t in arabic-indic digits": lambda body: "t=\u0661\u0667\u0660\u0660,v1=" + _digest(body),
    "t non-ascii": lambda body: f"t=\u00e9\u00e9,v1={_digest(body)}",
    "t float": lambda body: f"t={time.time()},v1={_digest(body)}",
    "t empty": lambda body: f"t=,v1={_digest(body)}",
    "v1 non-ascii": lambda body: f"t={int(time.time())},v1=" + "\u00e9" * 64,
    "v1 non-ascii, right length after encoding": lambda body: f"t={int(time.time())},v1=" + "\u00ff" * 32,
    "v1 huge": lambda body: f"t={int(time.time())},v1={'a' * 100_000}",
    "v1 not hex": lambda body: f"t={int(time.time())},v1={'z' * 64}",
    "many v1": lambda body: f"t={int(time.time())}," + ",".join(["v1=" + "0" * 64] * 100),
    "nul bytes": lambda body: f"t={int(time.time())}\x00,v1={_digest(body)}\x00",
    "only commas": lambda body: "," * 500,
    "only equals": lambda body: "=" * 500,
    "header of 1 MB": lambda body: "t=1," + "x" * 1_000_000,
}


@pytest.mark.django_db
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_signature_header_is_401_and_changes_nothing(order, case):
    body = event(order)
    before = db_state()

    response = deliver(body, header=HOSTILE[case](body))

    assert response.status_code == 401, response.content
    assert response.json()["code"] == "invalid_signature"
    assert db_state() == before


def test_verify_raises_only_invalid_signature_for_every_hostile_header():
    body = {"event_id": "evt", "type": "payment.succeeded", "order_id": 1, "amount": "1.00", "currency": "IDR"}
    for case, build in HOSTILE.items():
        with pytest.raises(signing.InvalidSignature):
            signing.verify(header=build(body), body=encode(body), secret=SECRET, tolerance_seconds=300)
        assert case  # every case was exercised
