"""Payment events from the gateway (the signed webhook), applied exactly once. Checkout is in ``checkout.services``."""

import json
import logging
from collections.abc import Callable
from decimal import Decimal
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connection, transaction

from orders import services as order_services
from orders.exceptions import OrderNotFound
from orders.locks import lock_order
from orders.models import Order
from payments.models import PaymentAttempt, ProcessedEvent, UnmatchedPayment
from skincare import services as skincare_services
from skincare.db import db_now, retry_transient

logger = logging.getLogger(__name__)

EVENT_SUCCEEDED = "payment.succeeded"
EVENT_FAILED = "payment.failed"
EVENT_TYPES = (EVENT_SUCCEEDED, EVENT_FAILED)
Outcome = ProcessedEvent.Outcome


def processed_events_prune() -> int:
    """Applied webhook events past PROCESSED_EVENTS_RETENTION_DAYS (a gateway stops redelivering long before)."""
    return skincare_services.delete_older_than(
        table="processed_events", column="processed_at", seconds=settings.PROCESSED_EVENTS_RETENTION_DAYS * 86400
    )


def _record_event(*, event_id: str, event_type: str, order_id: int | None, payload: Any) -> bool:
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


class Decision(NamedTuple):
    """What one event does to a locked order: its outcome, the attempt to save (None: nothing recorded) and the
    order's transition (``orders.services``), if any."""

    outcome: str
    attempt: PaymentAttempt | None = None
    transition: Callable[..., Order] | None = None


def _decide(
    *, order: Order, event_type: str, amount: Decimal, currency: str, provider_reference: str, settled_in_time: bool
) -> Decision:
    """The outcome of one event for ``order`` (locked), by the rules of :func:`payment_event_apply`; locks the
    order's latest payment attempt (lock order step 6)."""
    latest = PaymentAttempt.objects.select_for_update(no_key=True).filter(order=order).order_by("-id").first()

    def open_attempt(status: str) -> PaymentAttempt:
        # An attempt that recorded money (succeeded, refund_required, amount_mismatch) is never rewritten:
        # that charge must stay visible, with its reference, for refunds and reconciliation. Only a pending
        # or failed attempt is reused; otherwise the event gets an attempt of its own.
        reusable = latest is not None and latest.status in (PaymentAttempt.Status.PENDING, PaymentAttempt.Status.FAILED)
        attempt = latest if reusable and latest is not None else PaymentAttempt(order=order, amount=order.total)
        attempt.status = status
        return attempt

    recorded = _recorded_charge(order=order, provider_reference=provider_reference)
    if event_type == EVENT_FAILED:
        return Decision(Outcome.FAILED, open_attempt(PaymentAttempt.Status.FAILED) if recorded is None else None)
    if recorded is not None:
        # This charge was reported before under another event id and its money is already on record.
        return Decision(
            Outcome.ALREADY_PAID if recorded.status == PaymentAttempt.Status.SUCCEEDED else Outcome(recorded.status)
        )
    if order.status == Order.Status.PAID:
        # A second successful charge for a paid order: keep the money visible for a refund.
        refund = PaymentAttempt(order=order, amount=order.total, status=PaymentAttempt.Status.REFUND_REQUIRED)
        return Decision(Outcome.REFUND_REQUIRED, refund)
    if currency != order.currency:
        return Decision(Outcome.CURRENCY_MISMATCH, open_attempt(PaymentAttempt.Status.CURRENCY_MISMATCH))
    if amount != order.total:
        return Decision(Outcome.AMOUNT_MISMATCH, open_attempt(PaymentAttempt.Status.AMOUNT_MISMATCH))
    if (
        order.status == Order.Status.PENDING_PAYMENT
        and order.payment_expires_at is not None
        and (settled_in_time or db_now() < order.payment_expires_at)
    ):
        return Decision(Outcome.PAID, open_attempt(PaymentAttempt.Status.SUCCEEDED), order_services.order_mark_paid)
    # Late: the order expired (maybe the sweeper has not run yet) or was cancelled. Never resurrect it.
    expire = order_services.order_expire if order.status == Order.Status.PENDING_PAYMENT else None
    return Decision(Outcome.REFUND_REQUIRED, open_attempt(PaymentAttempt.Status.REFUND_REQUIRED), expire)


@retry_transient
@transaction.atomic
def payment_event_apply(
    *,
    event_id: str,
    event_type: str,
    order_id: int,
    amount: Decimal | str,
    currency: str,
    provider_reference: str = "",
    payload: Any = None,
    settled_in_time: bool = False,
) -> str:
    """Apply one gateway event exactly once. Returns the outcome:

    ``duplicate`` (already applied: nothing changes), ``paid``, ``currency_mismatch`` / ``amount_mismatch`` (money
    in another currency than the order's, or another amount: recorded, order untouched, for ops; the currency is
    compared first, so 129,000 of any other currency never pays a 129,000 IDR order), ``refund_required`` (money for
    an order that is no longer payable: the order stays cancelled, no stock is re-reserved), ``already_paid``,
    ``failed``. A charge already on record (same provider reference, reported again under a new event id) changes
    nothing and reports that attempt's outcome again (:func:`_decide`). ``settled_in_time``: the caller knows the
    money was taken before the order's deadline although the event arrives after it (the sweeper's recovery of a
    lost notification: the gateway's session closed before the deadline, ``payments.sessions``), so a still
    pending order is paid rather than expired.

    Locks: lock order steps 1, 5, 6 and 8 (docs/locking.md).
    """
    if not _record_event(event_id=event_id, event_type=event_type, order_id=order_id, payload=payload):
        return Outcome.DUPLICATE
    order = lock_order(order_id=order_id)
    if order is None:
        raise OrderNotFound(order_id=order_id)
    amount = Decimal(amount)
    decision = _decide(
        order=order,
        event_type=event_type,
        amount=amount,
        currency=currency,
        provider_reference=provider_reference,
        settled_in_time=settled_in_time,
    )
    attempt = decision.attempt
    if attempt is not None:
        if event_type == EVENT_SUCCEEDED:
            attempt.received_amount = amount
            attempt.received_currency = currency
        if provider_reference:
            attempt.provider_reference = provider_reference
        attempt.save()
    _set_outcome(event_id=event_id, outcome=decision.outcome)
    if decision.transition is not None:
        decision.transition(order=order)  # lock order steps 6 (reservations) and 8 (stock rows): last
    if decision.outcome in (Outcome.AMOUNT_MISMATCH, Outcome.CURRENCY_MISMATCH, Outcome.REFUND_REQUIRED):
        logger.warning("payment event %s for order %s needs ops: %s", event_id, order.pk, decision.outcome)
    return decision.outcome


@retry_transient
@transaction.atomic
def unmatched_payment_record(
    *,
    event_id: str,
    gateway: str,
    gateway_order_id: str,
    transaction_id: str,
    gateway_status: str,
    amount: Decimal,
    currency: str,
    payload: Any = None,
) -> str:
    """Money the gateway confirms for a transaction id the shop never issued (``payments.sessions``): recorded once
    in ``unmatched_payments`` for ops, with its event, and applied to no order. Returns ``unmatched``, or
    ``duplicate`` for a redelivery."""
    if not _record_event(event_id=event_id, event_type=EVENT_SUCCEEDED, order_id=None, payload=payload):
        return Outcome.DUPLICATE
    UnmatchedPayment.objects.create(
        gateway=gateway,
        gateway_order_id=gateway_order_id,
        transaction_id=transaction_id,
        gateway_status=gateway_status,
        amount=amount,
        currency=currency,
        event_id=event_id,
    )
    _set_outcome(event_id=event_id, outcome=Outcome.UNMATCHED)
    logger.warning(
        "payment event %s: %s %s for %s transaction %s, which this shop did not issue: needs ops",
        event_id,
        amount,
        currency,
        gateway,
        gateway_order_id,
    )
    return Outcome.UNMATCHED


UNMATCHED_RESOLVE_SQL = """
UPDATE unmatched_payments SET resolved_at = now(), resolved_by = %s WHERE id = ANY(%s) AND resolved_at IS NULL
"""


@transaction.atomic
def unmatched_payments_resolve(*, ids: list[int], resolved_by: str) -> int:
    """Ops settled these unmatched payments at the gateway (refunded, or matched by hand): they stop counting as
    needing ops. Returns how many were still open."""
    with connection.cursor() as cursor:
        cursor.execute(UNMATCHED_RESOLVE_SQL, [resolved_by, ids])
        return cursor.rowcount
