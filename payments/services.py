"""Checkout and payment events: the top of the dependency chain (payments → orders → inventory)."""

import dataclasses
import json
import logging
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction

from orders import services as order_services
from orders.exceptions import OrderNotFound
from orders.locks import lock_order
from orders.models import Order
from payments.exceptions import IdempotencyKeyInProgress, IdempotencyKeyReused, RateLimited
from payments.models import IdempotencyKey, PaymentAttempt, ProcessedEvent
from skincare import services as skincare_services
from skincare.api import error_body
from skincare.db import db_now, retry_transient
from skincare.errors import DomainError
from skincare.validation import parse_rate

logger = logging.getLogger(__name__)

EVENT_SUCCEEDED = "payment.succeeded"
EVENT_FAILED = "payment.failed"
EVENT_TYPES = (EVENT_SUCCEEDED, EVENT_FAILED)
Outcome = ProcessedEvent.Outcome


# The order's pending payment attempt, written by the order's INSERT statement (see orders.services.order_open).
_PAYMENT_ATTEMPT_CTE = (
    """
new_payment_attempt AS (
    INSERT INTO payment_attempts (order_id, status, amount, provider_reference, created_at, updated_at)
    SELECT new_order.id, %(payment_attempt_status)s, new_order.total, '', new_order.created_at, new_order.created_at
    FROM new_order
)""",
    {"payment_attempt_status": PaymentAttempt.Status.PENDING.value},
)


@retry_transient
@transaction.atomic
def checkout(*, customer: User, items: Iterable[tuple[int, int]]) -> Order:
    """One short transaction: open a ``pending_payment`` order (order, lines, reservation rows, deadline
    from the database clock), create its payment attempt, then reserve the stock. The stock UPDATE is the
    last statement before COMMIT, so the inventory row lock is held for as short a time as possible.

    ``items`` is a sequence of (product_id, qty). Raises InvalidProduct, StockConflict, InvalidInput,
    PurchaseLimitExceeded, TooManyPendingOrders.
    """
    return _checkout(customer=customer, items=items)


@dataclasses.dataclass(frozen=True)
class CheckoutResult:
    """The answer to one checkout request: what to send, and whether it is a stored answer replayed."""

    status: int
    body: dict[str, Any]
    replayed: bool = False


Render = Callable[[Order], dict[str, Any]]


def _checkout(
    *, customer: User, items: Iterable[tuple[int, int]], before_reserve: Callable[[Order], None] | None = None
) -> Order:
    """The checkout's statements, inside the caller's transaction. ``before_reserve`` runs after the order and its
    attempt are written and before the stock is reserved (so nothing it does lengthens the hot row's lock)."""
    quantities = order_services.merge_quantities(items)
    order = order_services.order_open(customer=customer, quantities=quantities, also_insert=[_PAYMENT_ATTEMPT_CTE])
    if before_reserve is not None:
        before_reserve(order)
    order_services.order_reserve_stock(order=order, quantities=quantities)
    return order


def checkout_rate_limit(*, customer: User) -> None:
    """Count this checkout against CHECKOUT_RATE_LIMIT (off when empty): one upsert in its own transaction, so it
    counts even when the checkout is then refused (a bot hammering a sold-out product is limited too)."""
    rate = parse_rate(settings.CHECKOUT_RATE_LIMIT)
    if rate is None:
        return
    limit, window = rate
    retry_after = skincare_services.rate_limit_hit(
        scope="checkout", subject=str(customer.pk), limit=limit, window_seconds=window
    )
    if retry_after is not None:
        raise RateLimited(retry_after_seconds=retry_after, limit=settings.CHECKOUT_RATE_LIMIT)


def checkout_request(
    *,
    customer: User,
    items: Iterable[tuple[int, int]],
    render: Render,
    idempotency_key: str | None = None,
    fingerprint: str | None = None,
) -> CheckoutResult:
    """A checkout as the API serves it: the rate limit, then the checkout, idempotent when a key is given.
    ``render`` turns the new order into the 201 body."""
    checkout_rate_limit(customer=customer)
    if idempotency_key is None:
        order = checkout(customer=customer, items=items)
        return CheckoutResult(status=201, body=render(order))
    if fingerprint is None:
        raise ValueError("an idempotent checkout needs the request's fingerprint")
    return checkout_idempotent(
        customer=customer, items=items, key=idempotency_key, fingerprint=fingerprint, render=render
    )


_IDEMPOTENCY_CLAIM_SQL = """
INSERT INTO idempotency_keys (customer_id, key, fingerprint, created_at)
VALUES (%(customer_id)s, %(key)s, %(fingerprint)s, now())
ON CONFLICT (customer_id, key) DO UPDATE
    SET fingerprint = EXCLUDED.fingerprint, created_at = EXCLUDED.created_at,
        response_status = NULL, response_body = NULL
    WHERE idempotency_keys.created_at <= now() - make_interval(secs => %(ttl)s)
RETURNING id
"""


@dataclasses.dataclass(frozen=True)
class IdempotencyClaim:
    key_id: int | None  # the claimed row (this request runs the checkout), or None: the key was used before
    stored: IdempotencyKey | None = None


@transaction.atomic(savepoint=False)
def idempotency_key_claim(*, customer: User, key: str, fingerprint: str) -> IdempotencyClaim:
    """Claim ``key`` for this transaction, or return the stored use of it.

    One ``INSERT … ON CONFLICT``: if another transaction holds the same new key, PostgreSQL makes this one wait
    until that one commits or rolls back (bounded by ``lock_timeout``: then 503 busy). If it committed, the stored
    answer is returned; if it rolled back, this transaction gets the key. A key older than
    IDEMPOTENCY_KEY_TTL_SECONDS (not pruned yet) is taken over as if it were new.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            _IDEMPOTENCY_CLAIM_SQL,
            {
                "customer_id": customer.pk,
                "key": key,
                "fingerprint": fingerprint,
                "ttl": settings.IDEMPOTENCY_KEY_TTL_SECONDS,
            },
        )
        row = cursor.fetchone()
    if row is not None:
        return IdempotencyClaim(key_id=row[0])
    return IdempotencyClaim(key_id=None, stored=IdempotencyKey.objects.get(customer=customer, key=key))


@transaction.atomic(savepoint=False)
def idempotency_key_complete(*, key_id: int, status: int, body: dict[str, Any]) -> None:
    """Store the answer of a claimed key (commits with the checkout's transaction)."""
    IdempotencyKey.objects.filter(pk=key_id).update(response_status=status, response_body=body)


def _storable(exc: DomainError) -> bool:
    """Domain 4xx answers are stored and replayed; retryable ones (Retry-After: 429, 503) and 5xx are not."""
    return 400 <= exc.http_status < 500 and exc.retry_after is None


@retry_transient
@transaction.atomic
def checkout_idempotent(
    *, customer: User, items: Iterable[tuple[int, int]], key: str, fingerprint: str, render: Render
) -> CheckoutResult:
    """``checkout`` under an ``Idempotency-Key`` (scoped to the customer).

    The key is claimed by the first statement of the transaction (lock order step -1, before the customer's checkout
    lock). The checkout runs after a savepoint: a domain refusal (409 stock_conflict, 422 invalid_product, …) rolls
    back to it and the refusal is stored instead; the 201 body is stored before the stock is reserved, so no extra
    statement runs while the inventory row is locked. A 5xx or a retryable error rolls everything back, the key
    included: the client may retry. The same key with another body → IdempotencyKeyReused, nothing written.
    """
    claim = idempotency_key_claim(customer=customer, key=key, fingerprint=fingerprint)
    if claim.key_id is None:
        stored = claim.stored
        if stored is None or stored.fingerprint != fingerprint:
            raise IdempotencyKeyReused(idempotency_key=key)
        if stored.response_status is None:
            raise IdempotencyKeyInProgress(idempotency_key=key)
        return CheckoutResult(status=stored.response_status, body=dict(stored.response_body or {}), replayed=True)
    key_id = claim.key_id
    savepoint = transaction.savepoint()
    created: dict[str, Any] = {}

    def store_created(order: Order) -> None:
        created["body"] = render(order)
        idempotency_key_complete(key_id=key_id, status=201, body=created["body"])

    try:
        _checkout(customer=customer, items=items, before_reserve=store_created)
    except DomainError as exc:
        if not _storable(exc):
            raise
        # The inner atomic blocks (savepoint=False) marked the transaction for rollback when the error passed
        # through them. Rolling back to the savepoint makes it healthy again, so the mark is lifted (first: Django
        # refuses every statement, the ROLLBACK TO SAVEPOINT included, while it is set) and the refusal is stored.
        transaction.set_rollback(False)
        transaction.savepoint_rollback(savepoint)
        body = error_body(exc.message, exc.code, **exc.details)
        idempotency_key_complete(key_id=key_id, status=exc.http_status, body=body)
        return CheckoutResult(status=exc.http_status, body=body)
    # The savepoint is never released: COMMIT releases it, and a RELEASE would be one more round trip while the
    # inventory row is locked.
    return CheckoutResult(status=201, body=created["body"])


def processed_events_prune() -> int:
    """Applied webhook events past PROCESSED_EVENTS_RETENTION_DAYS (a gateway stops redelivering long before)."""
    return skincare_services.delete_older_than(
        table="processed_events", column="processed_at", seconds=settings.PROCESSED_EVENTS_RETENTION_DAYS * 86400
    )


def idempotency_keys_prune() -> int:
    """Idempotency keys past IDEMPOTENCY_KEY_TTL_SECONDS."""
    return skincare_services.delete_older_than(
        table="idempotency_keys", column="created_at", seconds=settings.IDEMPOTENCY_KEY_TTL_SECONDS
    )


def _record_event(*, event_id: str, event_type: str, order_id: int, payload: Any) -> bool:
    """Claim the event id. Returns False when the event was already applied (or is being applied by a
    concurrent delivery, in which case this waits for it and then sees it)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO processed_events (event_id, event_type, order_id, payload)
            VALUES (%s, %s, %s, %s)
            ON CONFLICT (event_id) DO NOTHING
            RETURNING event_id
            """,
            [event_id, event_type, order_id, json.dumps(payload)],
        )
        return cursor.fetchone() is not None


def _set_outcome(*, event_id: str, outcome: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("UPDATE processed_events SET outcome = %s WHERE event_id = %s", [outcome, event_id])


def _recorded_charge(*, order: Order, provider_reference: str) -> PaymentAttempt | None:
    """The attempt that already holds the money of this charge, if any. Without a provider reference charges
    cannot be told apart, except that a paid order's reference-less success is that very payment."""
    attempts = PaymentAttempt.objects.filter(
        order=order, provider_reference=provider_reference, received_amount__isnull=False
    )
    if not provider_reference:
        if order.status != Order.Status.PAID:
            return None
        attempts = attempts.filter(status=PaymentAttempt.Status.SUCCEEDED)
    return attempts.order_by("id").first()


@retry_transient
@transaction.atomic
def payment_event_apply(
    *,
    event_id: str,
    event_type: str,
    order_id: int,
    amount: Decimal | str,
    provider_reference: str = "",
    payload: Any = None,
) -> str:
    """Apply one gateway event exactly once. Returns the outcome:

    ``duplicate`` (already applied: nothing changes), ``paid``, ``amount_mismatch`` (recorded, order
    untouched, for ops), ``refund_required`` (money for an order that is no longer payable: the order stays
    cancelled, no stock is re-reserved), ``already_paid``, ``failed``. A charge already on record (same
    provider reference, reported again under a new event id) changes nothing and reports that attempt's
    outcome again.

    Locks: the event id first (only deliveries of the same event contend there, and each takes it before
    anything else), then the order row, its payment attempts, its reservations, inventory rows by ascending
    product id. The inventory rows are locked by the last statements of the transaction.
    """
    if not _record_event(event_id=event_id, event_type=event_type, order_id=order_id, payload=payload):
        return Outcome.DUPLICATE
    order = lock_order(order_id=order_id)
    if order is None:
        raise OrderNotFound(order_id=order_id)
    latest = PaymentAttempt.objects.select_for_update(no_key=True).filter(order=order).order_by("-id").first()
    amount = Decimal(amount)

    def open_attempt() -> PaymentAttempt:
        # An attempt that recorded money (succeeded, refund_required, amount_mismatch) is never rewritten:
        # that charge must stay visible, with its reference, for refunds and reconciliation. Only a pending
        # or failed attempt is reused; otherwise the event gets an attempt of its own.
        if latest is not None and latest.status in (PaymentAttempt.Status.PENDING, PaymentAttempt.Status.FAILED):
            return latest
        return PaymentAttempt(order=order, amount=order.total)

    transition = None
    attempt = None
    recorded = _recorded_charge(order=order, provider_reference=provider_reference)
    if event_type == EVENT_FAILED:
        outcome = Outcome.FAILED
        if recorded is None:
            attempt = open_attempt()
            attempt.status = PaymentAttempt.Status.FAILED
    elif recorded is not None:
        # This charge was reported before under another event id and its money is already on record.
        outcome = (
            Outcome.ALREADY_PAID if recorded.status == PaymentAttempt.Status.SUCCEEDED else Outcome(recorded.status)
        )
    elif order.status == Order.Status.PAID:
        # A second successful charge for a paid order: keep the money visible for a refund.
        outcome = Outcome.REFUND_REQUIRED
        attempt = PaymentAttempt(order=order, amount=order.total, status=PaymentAttempt.Status.REFUND_REQUIRED)
    elif amount != order.total:
        outcome = Outcome.AMOUNT_MISMATCH
        attempt = open_attempt()
        attempt.status = PaymentAttempt.Status.AMOUNT_MISMATCH
    elif (
        order.status == Order.Status.PENDING_PAYMENT
        and order.payment_expires_at is not None
        and db_now() < order.payment_expires_at
    ):
        outcome = Outcome.PAID
        attempt = open_attempt()
        attempt.status = PaymentAttempt.Status.SUCCEEDED
        transition = order_services.order_mark_paid
    else:
        # Late: the order expired (maybe the sweeper has not run yet) or was cancelled. Never resurrect it.
        outcome = Outcome.REFUND_REQUIRED
        attempt = open_attempt()
        attempt.status = PaymentAttempt.Status.REFUND_REQUIRED
        if order.status == Order.Status.PENDING_PAYMENT:
            transition = order_services.order_expire

    if attempt is not None:
        if event_type == EVENT_SUCCEEDED:
            attempt.received_amount = amount
        if provider_reference:
            attempt.provider_reference = provider_reference
        attempt.save()
    _set_outcome(event_id=event_id, outcome=outcome)
    if transition is not None:
        transition(order=order)  # takes the reservation and inventory locks: last
    if outcome in (Outcome.AMOUNT_MISMATCH, Outcome.REFUND_REQUIRED):
        logger.warning("payment event %s for order %s needs ops: %s", event_id, order.pk, outcome)
    return outcome
