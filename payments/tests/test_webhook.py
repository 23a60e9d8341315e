"""The signed payment webhook: who may call it, what a bad body gets, and what each event does to the data.

Every refusal (401/400/404/503) is checked against a full snapshot of the database taken before the call:
nothing may change. Every accepted event is checked against the order, its reservations, the stock counters,
the payment attempts, the processed-events log and the stock ledger.
"""

import json
import threading
import time
from decimal import Decimal

import pytest
from django.db import connections, transaction
from django.test import Client, override_settings

from checkout.testing import place_order
from devtools.testing import assert_invariants, make_overdue
from inventory.models import Inventory, StockBucket, StockMovement
from orders import services as order_services
from orders.models import Order, Reservation
from payments import services, signing
from payments.models import NEEDS_OPS, PaymentAttempt, ProcessedEvent

SECRET = "whsec-test-lifecycle-secret"
WEBHOOK_URL = "/v1/payments/webhook"


@pytest.fixture(autouse=True)
def webhook_settings(settings):
    settings.PAYMENT_WEBHOOK_SECRET = SECRET
    settings.PAYMENT_WEBHOOK_TOLERANCE_SECONDS = 300
    return settings


@pytest.fixture
def order(make_product, customer):
    """A pending order for 2 x 12.50 + 1 x 12.50 = 37.50 over two products with 10 units each."""
    first = make_product(stock=10, price="12.50")
    second = make_product(stock=10, price="12.50")
    return place_order(customer=customer, items=[(first.pk, 2), (second.pk, 1)])


def event(
    order, *, event_id="evt-1", type=services.EVENT_SUCCEEDED, amount=None, currency="IDR", reference="ch_1", **extra
):
    return {
        "event_id": event_id,
        "type": type,
        "order_id": order.pk,
        "amount": str(order.total) if amount is None else amount,
        "currency": currency,
        "provider_reference": reference,
        **extra,
    }


def encode(body):
    return body if isinstance(body, bytes) else json.dumps(body).encode()


def deliver(body, *, secret=SECRET, timestamp=None, header=None, client=None):
    """POST ``body`` (dict or raw bytes) signed with ``secret``; ``header`` overrides the signature header
    entirely (``False`` sends none)."""
    raw = encode(body)
    if header is None:
        header = signing.sign(body=raw, secret=secret, timestamp=timestamp)
    extra = {} if header is False else {"HTTP_X_SIGNATURE": header}
    return (client or Client()).post(WEBHOOK_URL, data=raw, content_type="application/json", **extra)


def db_state():
    """Everything the webhook could touch, in a comparable form."""
    return {
        "orders": list(Order.objects.order_by("id").values_list("id", "status", "cancel_reason", "payment_expires_at")),
        "reservations": list(Reservation.objects.order_by("id").values_list("id", "status", "qty")),
        "inventories": list(
            Inventory.objects.order_by("product_id").values_list(
                "product_id", "available_stock", "reserved_stock", "version"
            )
        ),
        "attempts": list(
            PaymentAttempt.objects.order_by("id").values_list(
                "id", "order_id", "status", "amount", "received_amount", "provider_reference"
            )
        ),
        "events": list(ProcessedEvent.objects.order_by("event_id").values_list("event_id", "outcome", "order_id")),
        "ledger": list(StockMovement.objects.order_by("id").values_list("id", "reason", "order_id")),
    }


def stock(product_id):
    return Inventory.objects.values_list("available_stock", "reserved_stock").get(product_id=product_id)


def lines_of(order):
    return list(order.lines.order_by("product_id").values_list("product_id", "qty"))


# --------------------------------------------------------------------------------------------------------------
# Signatures: 401 and nothing changes


def _now():
    return int(time.time())


def _valid_digest(body):
    return signing.sign(body=encode(body), secret=SECRET, timestamp=_now()).split("v1=")[1]


SIGNATURE_CASES = {
    "wrong secret": lambda body: signing.sign(body=encode(body), secret="not-the-secret"),
    "stale timestamp": lambda body: signing.sign(body=encode(body), secret=SECRET, timestamp=_now() - 301),
    "very old timestamp": lambda body: signing.sign(body=encode(body), secret=SECRET, timestamp=_now() - 86400),
    # +302, not +301: the server's clock moves on while the request is in flight, which brings a future timestamp
    # closer to the window (a second boundary crossed between signing and checking made +301 pass under load).
    "future timestamp": lambda body: signing.sign(body=encode(body), secret=SECRET, timestamp=_now() + 302),
    "timestamp zero": lambda body: signing.sign(body=encode(body), secret=SECRET, timestamp=0),
    "empty header": lambda body: "",
    "garbage header": lambda body: "garbage",
    "t not a number": lambda body: f"t=yesterday,v1={_valid_digest(body)}",
    "no timestamp": lambda body: f"v1={_valid_digest(body)}",
    "no v1": lambda body: f"t={_now()}",
    "empty v1": lambda body: f"t={_now()},v1=",
    "v0 scheme only": lambda body: f"t={_now()},v0={_valid_digest(body)}",
    "digest of other timestamp": lambda body: f"t={_now() - 5},v1={_valid_digest(body)}",
    "truncated digest": lambda body: f"t={_now()},v1={_valid_digest(body)[:-2]}",
    "signature of another body": lambda body: signing.sign(body=encode({**body, "amount": "0.01"}), secret=SECRET),
}


@pytest.mark.django_db
@pytest.mark.parametrize("case", sorted(SIGNATURE_CASES))
def test_bad_signature_is_401_and_changes_nothing(order, case):
    body = event(order)
    before = db_state()

    response = deliver(body, header=SIGNATURE_CASES[case](body))

    assert response.status_code == 401, response.content
    assert response.json()["code"] == "invalid_signature"
    assert response.json()["error"]
    assert db_state() == before


@pytest.mark.django_db
def test_tampered_body_is_401_and_changes_nothing(order):
    signed = encode(event(order))
    tampered = signed.replace(b'"ch_1"', b'"ch_2"')
    assert tampered != signed
    before = db_state()

    response = deliver(tampered, header=signing.sign(body=signed, secret=SECRET))

    assert response.status_code == 401
    assert response.json()["code"] == "invalid_signature"
    assert db_state() == before


@pytest.mark.django_db
def test_missing_signature_header_is_401_and_changes_nothing(order):
    before = db_state()

    response = deliver(event(order), header=False)

    assert response.status_code == 401
    assert response.json() == {"error": "Missing X-Signature header.", "code": "invalid_signature"}
    assert db_state() == before


@pytest.mark.django_db
@pytest.mark.parametrize("signed_with", ["", SECRET])
def test_unset_secret_refuses_every_webhook(order, webhook_settings, signed_with):
    webhook_settings.PAYMENT_WEBHOOK_SECRET = ""
    before = db_state()

    response = deliver(event(order), secret=signed_with)

    assert response.status_code == 401
    assert response.json()["code"] == "invalid_signature"
    assert "not configured" in response.json()["error"]
    assert db_state() == before


@pytest.mark.django_db
def test_signature_accepted_inside_tolerance_and_with_rotated_secrets(order):
    """The positive side of the table: a timestamp 290 s old is fine, and a header carrying several v1
    digests (key rotation) passes when one of them is right."""
    body = event(order)
    raw = encode(body)
    timestamp = _now() - 290
    good = signing.sign(body=raw, secret=SECRET, timestamp=timestamp).split("v1=")[1]
    old = signing.sign(body=raw, secret="previous-secret", timestamp=timestamp).split("v1=")[1]

    response = deliver(body, header=f"t={timestamp},v1={old},v1={good}")

    assert response.status_code == 200, response.content
    assert response.json() == {"status": "paid", "event_id": "evt-1"}


def test_verify_rejects_by_the_tolerance_window_exactly():
    body = b"{}"
    header = signing.sign(body=body, secret=SECRET, timestamp=1_000_000)
    signing.verify(header=header, body=body, secret=SECRET, tolerance_seconds=300, now=1_000_300)
    signing.verify(header=header, body=body, secret=SECRET, tolerance_seconds=300, now=999_700)
    for now in (1_000_301, 999_699):
        with pytest.raises(signing.InvalidSignature):
            signing.verify(header=header, body=body, secret=SECRET, tolerance_seconds=300, now=now)


# --------------------------------------------------------------------------------------------------------------
# Malformed bodies (correctly signed): 400 and nothing changes


def _without(key):
    def build(order):
        body = event(order)
        del body[key]
        return body

    return build


def _with(**fields):
    return lambda order: {**event(order), **fields}


MALFORMED_BODIES = {
    "not json": (lambda order: b'{"event_id": "evt-1", ', "malformed_json", None),
    "json array": (lambda order: [event(order)], "invalid_request", None),
    "json string": (lambda order: "payment", "invalid_request", None),
    "json null": (lambda order: None, "invalid_request", None),
    "empty object": (lambda order: {}, "invalid_request", "event_id"),
    "no event_id": (_without("event_id"), "invalid_request", "event_id"),
    "blank event_id": (_with(event_id="   "), "invalid_request", "event_id"),
    "numeric event_id": (_with(event_id=17), "invalid_request", "event_id"),
    "event_id too long": (_with(event_id="e" * 201), "invalid_request", "event_id"),
    "event_id with NUL": (_with(event_id="evt\u00001"), "invalid_request", "event_id"),
    "no type": (_without("type"), "invalid_request", "type"),
    "unknown type": (_with(type="payment.refunded"), "invalid_request", "type"),
    "no order_id": (_without("order_id"), "invalid_request", "order_id"),
    "order_id string": (lambda order: {**event(order), "order_id": str(order.pk)}, "invalid_request", "order_id"),
    "order_id float": (lambda order: {**event(order), "order_id": float(order.pk)}, "invalid_request", "order_id"),
    "order_id bool": (_with(order_id=True), "invalid_request", "order_id"),
    "order_id zero": (_with(order_id=0), "invalid_request", "order_id"),
    "order_id negative": (_with(order_id=-3), "invalid_request", "order_id"),
    "order_id beyond bigint": (_with(order_id=2**63), "invalid_request", "order_id"),
    "no amount": (_without("amount"), "invalid_request", "amount"),
    "amount number": (_with(amount=37.5), "invalid_request", "amount"),
    "amount words": (_with(amount="thirty"), "invalid_request", "amount"),
    "amount NaN": (_with(amount="NaN"), "invalid_request", "amount"),
    "amount Infinity": (_with(amount="Infinity"), "invalid_request", "amount"),
    "amount negative": (_with(amount="-37.50"), "invalid_request", "amount"),
    "amount three decimals": (_with(amount="37.505"), "invalid_request", "amount"),
    "amount empty": (_with(amount=""), "invalid_request", "amount"),
    # The column is NUMERIC(12, 2): a larger figure can never be stored, so it is bad input, not a 500.
    "amount beyond the column": (_with(amount="10000000000.00"), "invalid_request", "amount"),
    "amount huge exponent": (_with(amount="1E+30"), "invalid_request", "amount"),
    # Every event carries its currency: without one the amount means nothing.
    "no currency": (_without("currency"), "invalid_request", "currency"),
    "currency with a digit": (_with(currency="ID1"), "invalid_request", "currency"),
    "currency not ASCII": (_with(currency="İDR"), "invalid_request", "currency"),
    "currency number": (_with(currency=360), "invalid_request", "currency"),
    "currency too long": (_with(currency="IDRX"), "invalid_request", "currency"),
    "currency empty": (_with(currency=""), "invalid_request", "currency"),
    "reference number": (_with(provider_reference=5), "invalid_request", "provider_reference"),
    "reference too long": (_with(provider_reference="r" * 201), "invalid_request", "provider_reference"),
    "reference with NUL": (_with(provider_reference="ch\u0000"), "invalid_request", "provider_reference"),
    # The raw payload is stored as jsonb, which cannot hold U+0000 anywhere.
    "NUL in an extra field": (_with(metadata={"note": "a\u0000b"}), "invalid_request", "body"),
    "NUL in an extra key": (_with(metadata={"a\u0000": 1}), "invalid_request", "body"),
    # A lone surrogate is valid JSON but cannot be encoded as UTF-8 for the database.
    "event_id lone surrogate": (_with(event_id="evt\ud800"), "invalid_request", "event_id"),
    "lone surrogate in an extra field": (_with(metadata=["ok", "\udfff"]), "invalid_request", "body"),
}


@pytest.mark.django_db
@pytest.mark.parametrize("case", sorted(MALFORMED_BODIES))
def test_malformed_body_is_400_and_changes_nothing(order, case):
    build, code, field = MALFORMED_BODIES[case]
    before = db_state()

    response = deliver(build(order))

    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == code
    assert body["error"]
    if field is not None:
        assert field in body["fields"], body
    assert db_state() == before


# --------------------------------------------------------------------------------------------------------------
# Outcomes


def consume_rows(order):
    return sorted(
        StockMovement.objects.filter(order_id=order.pk, reason="consume").values_list(
            "product_id", "available_delta", "reserved_delta"
        )
    )


@pytest.mark.django_db
def test_success_pays_consumes_and_records_everything(order):
    lines = lines_of(order)
    stock_before = {pid: stock(pid) for pid, _ in lines}
    body = event(order, reference="ch_paid")

    response = deliver(body)

    assert response.status_code == 200
    assert response.json() == {"status": "paid", "event_id": "evt-1"}
    order.refresh_from_db()
    assert (order.status, order.cancel_reason) == ("paid", None)
    assert set(order.reservations.values_list("status", flat=True)) == {"consumed"}
    for pid, qty in lines:
        available, reserved = stock_before[pid]
        assert stock(pid) == (available, reserved - qty)  # units leave the shop; nothing returns to sale
    assert consume_rows(order) == [(pid, 0, -qty) for pid, qty in lines]
    attempt = PaymentAttempt.objects.get(order=order)
    assert (attempt.status, attempt.received_amount, attempt.provider_reference) == (
        "succeeded",
        Decimal("37.50"),
        "ch_paid",
    )
    processed = ProcessedEvent.objects.get()
    assert (processed.event_id, processed.event_type, processed.order_id, processed.outcome) == (
        "evt-1",
        "payment.succeeded",
        order.pk,
        "paid",
    )
    assert processed.payload == body
    assert_invariants()


@pytest.mark.django_db
def test_wrong_amount_is_recorded_and_leaves_the_order_alone(order):
    before = db_state()

    response = deliver(event(order, amount="37.49"))

    assert response.status_code == 200
    assert response.json() == {"status": "amount_mismatch", "event_id": "evt-1"}
    after = db_state()
    for unchanged in ("orders", "reservations", "inventories", "ledger"):
        assert after[unchanged] == before[unchanged], unchanged
    attempt = PaymentAttempt.objects.get(order=order)
    assert (attempt.status, attempt.amount, attempt.received_amount) == (
        "amount_mismatch",
        Decimal("37.50"),
        Decimal("37.49"),
    )
    assert after["events"] == [("evt-1", "amount_mismatch", order.pk)]
    assert_invariants()


@pytest.mark.django_db
@pytest.mark.parametrize("amount", [None, "1.00"])
def test_another_currency_is_a_mismatch_never_a_payment(order, amount):
    """A gateway account that takes several currencies: the order's number in a cheaper currency (or any number in
    it) is recorded as a currency mismatch for ops, exactly like a wrong amount; the order is not paid."""
    assert order.currency == "IDR"
    before = db_state()

    response = deliver(event(order, currency="JPY", amount=amount))

    assert response.status_code == 200
    assert response.json() == {"status": "currency_mismatch", "event_id": "evt-1"}
    after = db_state()
    for unchanged in ("orders", "reservations", "inventories", "ledger"):
        assert after[unchanged] == before[unchanged], unchanged
    attempt = PaymentAttempt.objects.get(order=order)
    received = order.total if amount is None else Decimal(amount)
    assert (attempt.status, attempt.received_amount, attempt.received_currency) == (
        "currency_mismatch",
        received,
        "JPY",
    )
    assert PaymentAttempt.objects.filter(status__in=NEEDS_OPS).count() == 1  # flagged for ops
    assert after["events"] == [("evt-1", "currency_mismatch", order.pk)]
    # Control: the same event in the order's currency pays it.
    assert deliver(event(order, event_id="evt-2", reference="ch_2")).json()["status"] == "paid"
    assert_invariants()


@pytest.mark.django_db
@pytest.mark.parametrize(("sent", "outcome", "recorded"), [("idr", "paid", "IDR"), ("jpY", "currency_mismatch", "JPY")])
def test_a_currency_code_in_any_case_is_that_code(order, sent, outcome, recorded):
    """ISO 4217 codes are case-insensitive on input: "idr" pays an IDR order, "jpY" is a JPY mismatch; the attempt
    is recorded in capitals either way."""
    response = deliver(event(order, currency=sent))

    assert response.status_code == 200, response.content
    assert response.json() == {"status": outcome, "event_id": "evt-1"}
    attempt = PaymentAttempt.objects.get(order=order)
    assert attempt.received_currency == recorded
    assert ProcessedEvent.objects.get().outcome == outcome
    assert_invariants()


@pytest.mark.django_db
def test_the_order_shows_its_currency(order, customer, settings):
    client = Client(HTTP_AUTHORIZATION=f"Bearer {customer.api_token}")
    assert order.currency == settings.SHOP_CURRENCY == "IDR"
    assert client.get(f"/v1/orders/{order.pk}").json()["currency"] == "IDR"
    created = client.post(
        "/v1/checkout",
        {"items": [{"product_id": order.lines.first().product_id, "qty": 1}]},
        content_type="application/json",
    )
    assert created.status_code == 201, created.json()
    assert created.json()["currency"] == "IDR"


@pytest.mark.django_db
def test_amount_with_fewer_decimals_is_the_same_amount(order):
    response = deliver(event(order, amount="37.5"))

    assert response.json() == {"status": "paid", "event_id": "evt-1"}
    assert Order.objects.get(pk=order.pk).status == "paid"


@pytest.mark.django_db
def test_payment_for_cancelled_order_requires_refund_and_reserves_nothing(order, customer):
    order_services.order_cancel(order_id=order.pk, customer=customer)
    before = db_state()

    response = deliver(event(order))

    assert response.status_code == 200
    assert response.json() == {"status": "refund_required", "event_id": "evt-1"}
    after = db_state()
    for unchanged in ("orders", "reservations", "inventories", "ledger"):
        assert after[unchanged] == before[unchanged], unchanged
    order.refresh_from_db()
    assert (order.status, order.cancel_reason) == ("cancelled", "customer_cancelled")
    assert set(order.reservations.values_list("status", flat=True)) == {"cancelled"}
    attempt = PaymentAttempt.objects.get(order=order)
    assert (attempt.status, attempt.received_amount) == ("refund_required", Decimal("37.50"))
    assert after["events"] == [("evt-1", "refund_required", order.pk)]
    assert consume_rows(order) == []
    assert_invariants()


@pytest.mark.django_db
def test_late_payment_before_the_sweeper_expires_the_order(order):
    """Pending, but past its deadline by the database clock: the payment must not resurrect it. The order
    is expired on the spot (payment_timeout), its units go back on sale, and the money is flagged."""
    lines = lines_of(order)
    make_overdue(order)
    stock_before = {pid: stock(pid) for pid, _ in lines}

    response = deliver(event(order))

    assert response.status_code == 200
    assert response.json() == {"status": "refund_required", "event_id": "evt-1"}
    order.refresh_from_db()
    assert (order.status, order.cancel_reason) == ("cancelled", "payment_timeout")
    assert set(order.reservations.values_list("status", flat=True)) == {"expired"}
    for pid, qty in lines:
        available, reserved = stock_before[pid]
        assert stock(pid) == (available + qty, reserved - qty)
    assert sorted(
        StockMovement.objects.filter(order_id=order.pk, reason="expire").values_list(
            "product_id", "available_delta", "reserved_delta"
        )
    ) == [(pid, qty, -qty) for pid, qty in lines]
    assert consume_rows(order) == []
    attempt = PaymentAttempt.objects.get(order=order)
    assert (attempt.status, attempt.received_amount) == ("refund_required", Decimal("37.50"))
    assert ProcessedEvent.objects.get().outcome == "refund_required"
    # The sweeper, arriving later, finds nothing left to do for this order.
    assert order_services.orders_expire_due().orders == 0
    assert_invariants()


@pytest.mark.django_db
def test_failed_payment_keeps_order_pending_and_a_later_success_pays(order):
    before = db_state()

    response = deliver(event(order, type=services.EVENT_FAILED, event_id="evt-fail", reference="ch_declined"))

    assert response.status_code == 200
    assert response.json() == {"status": "failed", "event_id": "evt-fail"}
    after = db_state()
    for unchanged in ("orders", "reservations", "inventories", "ledger"):
        assert after[unchanged] == before[unchanged], unchanged
    attempt = PaymentAttempt.objects.get(order=order)
    assert (attempt.status, attempt.received_amount, attempt.provider_reference) == ("failed", None, "ch_declined")
    assert after["events"] == [("evt-fail", "failed", order.pk)]

    # The customer tries again with another card: a new event pays the order.
    response = deliver(event(order, event_id="evt-retry", reference="ch_ok"))

    assert response.json() == {"status": "paid", "event_id": "evt-retry"}
    order.refresh_from_db()
    assert order.status == "paid"
    assert PaymentAttempt.objects.get(order=order).status == "succeeded"
    assert_invariants()


@pytest.mark.django_db
def test_replayed_event_is_duplicate_and_changes_nothing(order):
    first = deliver(event(order))
    assert first.json() == {"status": "paid", "event_id": "evt-1"}
    after_first = db_state()

    replays = [
        deliver(event(order)),  # the very same delivery again
        deliver(event(order, type=services.EVENT_FAILED)),  # same id, other content: the id decides
        deliver(event(order, amount="1.00", reference="ch_other")),
    ]

    for response in replays:
        assert response.status_code == 200
        assert response.json() == {"status": "duplicate", "event_id": "evt-1"}
    assert db_state() == after_first
    assert ProcessedEvent.objects.get().outcome == "paid"
    assert_invariants()


@pytest.mark.django_db
def test_second_distinct_success_for_paid_order_is_flagged_for_refund(order):
    lines = lines_of(order)
    deliver(event(order, event_id="evt-a", reference="ch_a"))
    stock_after_payment = {pid: stock(pid) for pid, _ in lines}
    ledger_after_payment = StockMovement.objects.count()

    response = deliver(event(order, event_id="evt-b", reference="ch_b"))

    assert response.status_code == 200
    assert response.json() == {"status": "refund_required", "event_id": "evt-b"}
    order.refresh_from_db()
    assert order.status == "paid"
    assert {pid: stock(pid) for pid, _ in lines} == stock_after_payment  # consumed once, not twice
    assert StockMovement.objects.count() == ledger_after_payment
    assert consume_rows(order) == [(pid, 0, -qty) for pid, qty in lines]
    attempts = list(
        PaymentAttempt.objects.filter(order=order)
        .order_by("id")
        .values_list("status", "received_amount", "provider_reference")
    )
    assert attempts == [
        ("succeeded", Decimal("37.50"), "ch_a"),
        ("refund_required", Decimal("37.50"), "ch_b"),
    ]
    assert list(ProcessedEvent.objects.order_by("event_id").values_list("event_id", "outcome")) == [
        ("evt-a", "paid"),
        ("evt-b", "refund_required"),
    ]
    assert_invariants()


@pytest.mark.django_db
def test_same_charge_reported_again_under_a_new_event_id_is_already_paid(order):
    deliver(event(order, event_id="evt-a", reference="ch_a"))
    before = db_state()

    response = deliver(event(order, event_id="evt-a2", reference="ch_a"))

    assert response.json() == {"status": "already_paid", "event_id": "evt-a2"}
    after = db_state()
    for unchanged in ("orders", "reservations", "inventories", "ledger", "attempts"):
        assert after[unchanged] == before[unchanged], unchanged
    assert after["events"] == [("evt-a", "paid", order.pk), ("evt-a2", "already_paid", order.pk)]


@pytest.mark.django_db
def test_unknown_order_is_404_and_leaves_no_trace(order):
    before = db_state()

    response = deliver({**event(order), "order_id": order.pk + 1000})

    assert response.status_code == 404
    assert response.json()["code"] == "order_not_found"
    assert db_state() == before  # no processed_events row: a redelivery once the order exists is not lost


# --------------------------------------------------------------------------------------------------------------
# Lock timeouts: 503 with Retry-After, everything rolled back, the redelivery succeeds


def hold_lock(lock, locked, release):
    """On its own connection: take a row lock with ``lock()`` (a select_for_update) and keep it until
    ``release`` is set."""
    try:
        with transaction.atomic():
            assert lock(), "the row to lock does not exist"
            locked.set()
            assert release.wait(timeout=30), "the test never released the lock"
    finally:
        connections.close_all()


def deliver_while_locked(body, lock):
    locked, release = threading.Event(), threading.Event()
    errors = []

    def holder():
        try:
            hold_lock(lock, locked, release)
        except BaseException as exc:
            errors.append(exc)
            locked.set()

    thread = threading.Thread(target=holder, name="lock-holder")
    thread.start()
    try:
        assert locked.wait(timeout=30)
        assert errors == []
        # A short lock timeout for the service transaction (it sets it with SET LOCAL from the setting).
        with override_settings(DB_LOCK_TIMEOUT_MS=200):
            response = deliver(body)
    finally:
        release.set()
        thread.join(timeout=30)
    assert not thread.is_alive()
    assert errors == []
    return response


@pytest.mark.django_db(transaction=True)
def test_order_row_locked_elsewhere_gives_503_then_redelivery_pays(order):
    before = db_state()

    response = deliver_while_locked(event(order), lambda: list(Order.objects.select_for_update().filter(pk=order.pk)))

    assert response.status_code == 503, response.content
    assert response["Retry-After"] == "1"
    assert response.json()["code"] == "busy"
    assert db_state() == before  # the event claim was rolled back with the rest

    retry = deliver(event(order))

    assert retry.json() == {"status": "paid", "event_id": "evt-1"}
    assert Order.objects.get(pk=order.pk).status == "paid"
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_inventory_row_locked_elsewhere_rolls_back_attempt_and_claim(order):
    """The lock timeout strikes on the last statements (the stock rows), after the event claim, the order
    lock and the attempt update were already made: all of it is rolled back."""
    product_id = lines_of(order)[0][0]
    before = db_state()

    response = deliver_while_locked(
        event(order), lambda: list(StockBucket.objects.select_for_update().filter(product_id=product_id, bucket=0))
    )

    assert response.status_code == 503
    assert response["Retry-After"] == "1"
    assert db_state() == before

    assert deliver(event(order)).json() == {"status": "paid", "event_id": "evt-1"}
    assert_invariants()


# --------------------------------------------------------------------------------------------------------------
# Money that was recorded is never overwritten: every charge that reached us stays visible with its reference


def attempts_of(order):
    return list(
        PaymentAttempt.objects.filter(order=order)
        .order_by("id")
        .values_list("status", "received_amount", "provider_reference")
    )


@pytest.mark.django_db
def test_failure_report_after_success_keeps_the_successful_charge(order):
    """Gateways deliver out of order: the decline of the first card arrives after the second card paid."""
    assert deliver(event(order, event_id="evt-ok", reference="ch_ok")).json()["status"] == "paid"

    response = deliver(event(order, event_id="evt-declined", type=services.EVENT_FAILED, reference="ch_declined"))

    assert response.json() == {"status": "failed", "event_id": "evt-declined"}
    assert Order.objects.get(pk=order.pk).status == "paid"
    recorded = attempts_of(order)
    assert recorded[0] == ("succeeded", Decimal("37.50"), "ch_ok")  # the charge to refund or reconcile against
    assert all(status == "failed" and received is None for status, received, _ in recorded[1:])
    assert_invariants()


@pytest.mark.django_db
def test_underpayment_then_full_payment_keeps_the_mismatch_for_ops(order):
    assert deliver(event(order, event_id="evt-short", amount="37.49", reference="ch_short")).json()["status"] == (
        "amount_mismatch"
    )

    response = deliver(event(order, event_id="evt-full", reference="ch_full"))

    assert response.json() == {"status": "paid", "event_id": "evt-full"}
    assert attempts_of(order) == [
        ("amount_mismatch", Decimal("37.49"), "ch_short"),  # 37.49 still has to go back to the customer
        ("succeeded", Decimal("37.50"), "ch_full"),
    ]
    assert PaymentAttempt.objects.filter(status__in=["amount_mismatch", "refund_required"]).count() == 1
    assert_invariants()


@pytest.mark.django_db
def test_first_charge_reported_again_after_a_refund_flag_is_not_refunded(order):
    deliver(event(order, event_id="evt-a", reference="ch_a"))
    deliver(event(order, event_id="evt-b", reference="ch_b"))
    before = db_state()

    response = deliver(event(order, event_id="evt-a-again", reference="ch_a"))

    assert response.json() == {"status": "already_paid", "event_id": "evt-a-again"}
    assert attempts_of(order) == [
        ("succeeded", Decimal("37.50"), "ch_a"),
        ("refund_required", Decimal("37.50"), "ch_b"),
    ]
    after = db_state()
    for unchanged in ("orders", "reservations", "inventories", "ledger", "attempts"):
        assert after[unchanged] == before[unchanged], unchanged


@pytest.mark.django_db
def test_refund_flagged_charge_reported_again_is_flagged_once(order):
    deliver(event(order, event_id="evt-a", reference="ch_a"))
    deliver(event(order, event_id="evt-b", reference="ch_b"))
    before = db_state()

    response = deliver(event(order, event_id="evt-b-again", reference="ch_b"))

    assert response.json() == {"status": "refund_required", "event_id": "evt-b-again"}
    assert db_state()["attempts"] == before["attempts"]


@pytest.mark.django_db
def test_two_late_charges_for_a_cancelled_order_are_both_kept_for_refund(order, customer):
    order_services.order_cancel(order_id=order.pk, customer=customer)

    first = deliver(event(order, event_id="evt-1", reference="ch_1"))
    again = deliver(event(order, event_id="evt-1-again", reference="ch_1"))
    second = deliver(event(order, event_id="evt-2", reference="ch_2"))

    assert [r.json()["status"] for r in (first, again, second)] == ["refund_required"] * 3
    assert attempts_of(order) == [
        ("refund_required", Decimal("37.50"), "ch_1"),
        ("refund_required", Decimal("37.50"), "ch_2"),
    ]
    assert Order.objects.get(pk=order.pk).status == "cancelled"
    assert_invariants()
