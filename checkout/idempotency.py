"""Idempotency keys (the ``Idempotency-Key`` header: IETF httpapi draft, Stripe semantics): a keyed checkout's
answer is stored with its key and replayed to a retry with the same key and body.

:func:`run_keyed_checkout` is the keyed flow of ``checkout.services.checkout_place`` (items or a cart): the key is
claimed first (:data:`CLAIM_KEY_SQL`, lock order step 1), the 201 answer is stored between the checkout's two
phases, and a client error is stored instead of the order. :func:`idempotency_keys_prune` forgets keys past their
time to live.
"""

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction

from checkout.exceptions import IdempotencyKeyInProgress, IdempotencyKeyReused
from checkout.models import IdempotencyKey
from orders.selectors import OrderView
from skincare import services as skincare_services
from skincare.errors import DomainError
from skincare.locks import require_transaction


class Refusal(NamedTuple):
    """A refusal given under an ``Idempotency-Key``: stored with the key and replayed as it was."""

    http_status: int
    body: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Placed:
    """The answer to a checkout: the order placed, or (under a key) the stored refusal; ``replayed`` when it is the
    stored answer of an earlier request with the same key."""

    order: OrderView | None = None
    refusal: Refusal | None = None
    replayed: bool = False


# The first statement of a keyed checkout (lock order step 1). If another transaction holds the same new key,
# PostgreSQL makes this one wait until that one commits (then nothing is returned and the stored answer is read) or
# rolls back (then this one gets the key). A key older than IDEMPOTENCY_KEY_TTL_SECONDS that was not pruned yet is
# taken over as if it were new.
CLAIM_KEY_SQL = """
INSERT INTO idempotency_keys (customer_id, key, fingerprint, created_at)
VALUES (%(customer_id)s, %(key)s, %(fingerprint)s, now())
ON CONFLICT (customer_id, key) DO UPDATE
    SET fingerprint = EXCLUDED.fingerprint, created_at = EXCLUDED.created_at,
        response_status = NULL, response_body = NULL
    WHERE idempotency_keys.created_at <= now() - make_interval(secs => %(ttl)s)
RETURNING id
"""

# Stored refusals are bounded per customer: beyond the newest IDEMPOTENCY_MAX_STORED_REFUSALS, older ones are
# forgotten (a retry of such a key runs the checkout again, which is what a client retrying a refusal expects).
TRIM_REFUSALS_SQL = """
DELETE FROM idempotency_keys WHERE id IN (
    SELECT id FROM idempotency_keys
     WHERE customer_id = %(customer_id)s AND response_status >= 400
     ORDER BY id DESC OFFSET %(keep)s)
"""


def replayable(exc: DomainError) -> bool:
    """Client errors are stored and replayed; retryable ones (with Retry-After: 409 lock_busy, 429, 503) and 5xx
    are not, so a client that waits and retries with the same key gets a fresh answer."""
    return 400 <= exc.http_status < 500 and exc.retry_after is None


def claim_key(*, customer: User, key: str, fingerprint: str) -> int | None:
    """Claim ``key`` for this transaction (its row id), or None when it was used before (see CLAIM_KEY_SQL)."""
    with connection.cursor() as cursor:
        cursor.execute(
            CLAIM_KEY_SQL,
            {
                "customer_id": customer.pk,
                "key": key,
                "fingerprint": fingerprint,
                "ttl": settings.IDEMPOTENCY_KEY_TTL_SECONDS,
            },
        )
        claimed = cursor.fetchone()
    return None if claimed is None else int(claimed[0])


def replay(*, customer: User, key: str, fingerprint: str) -> Placed:
    """The stored answer of an earlier request with ``key``; another body under the same key is refused."""
    stored = IdempotencyKey.objects.filter(customer=customer, key=key).first()
    if stored is None or stored.fingerprint != fingerprint:
        raise IdempotencyKeyReused(idempotency_key=key)
    if stored.response_status is None or stored.response_body is None:
        raise IdempotencyKeyInProgress(idempotency_key=key)
    if stored.response_status >= 400:
        return Placed(refusal=Refusal(stored.response_status, stored.response_body), replayed=True)
    return Placed(order=OrderView.from_json(stored.response_body, customer_id=customer.pk), replayed=True)


def _store_answer(*, key_id: int, status: int, body: dict[str, Any]) -> None:
    IdempotencyKey.objects.filter(pk=key_id).update(response_status=status, response_body=body)


def _store_refusal(*, customer: User, key_id: int, exc: DomainError) -> Refusal:
    """Store a replayable refusal as the answer of the claimed key (:func:`run_keyed_checkout` rolled the checkout
    back to the savepoint taken after the claim), keeping the customer's stored refusals bounded."""
    refusal = Refusal(exc.http_status, exc.body())
    _store_answer(key_id=key_id, status=refusal.http_status, body=refusal.body)
    with connection.cursor() as cursor:
        cursor.execute(
            TRIM_REFUSALS_SQL,
            {"customer_id": customer.pk, "keep": settings.IDEMPOTENCY_MAX_STORED_REFUSALS},
        )
    return refusal


def run_keyed_checkout(
    *,
    customer: User,
    key: str,
    fingerprint: str,
    open_order: Callable[[], OrderView],
    reserve_stock: Callable[[], OrderView],
) -> Placed:
    """The ``Idempotency-Key`` flow, inside the checkout's ``@retry_transient`` transaction
    (``checkout.services.checkout_place``). ``open_order`` is the checkout's first phase: everything it writes before
    the stock (for a cart, its claim and its link to the order too); ``reserve_stock`` its second.

    The key is claimed by the transaction's first statement (:data:`CLAIM_KEY_SQL`); a key used before is answered by
    :func:`replay`. Then a savepoint, ``open_order()``, the order stored as the key's 201 answer, and
    ``reserve_stock()``: the answer is stored before the stock is reserved, so no extra statement runs while a stock
    row is locked. A replayable client error (:func:`replayable`: 409 stock_conflict, 422 invalid_product, a cart's
    404/409/410, …) rolls back to the savepoint and is stored as the answer instead. A retryable error (with
    Retry-After) or a 5xx rolls the whole transaction back, the key included, so a retry with the key runs again.
    """
    require_transaction()
    key_id = claim_key(customer=customer, key=key, fingerprint=fingerprint)
    if key_id is None:
        return replay(customer=customer, key=key, fingerprint=fingerprint)
    savepoint = transaction.savepoint()
    try:
        order = open_order()
        _store_answer(key_id=key_id, status=201, body=order.to_json())
        order = reserve_stock()
    except DomainError as exc:
        if not replayable(exc):
            raise
        # The inner atomic blocks (savepoint=False) marked the transaction for rollback when the error passed
        # through them. Rolling back to the savepoint makes it healthy again, so the mark is lifted (first: Django
        # refuses every statement, the ROLLBACK TO SAVEPOINT included, while it is set) and the refusal is stored.
        transaction.set_rollback(False)
        transaction.savepoint_rollback(savepoint)
        return Placed(refusal=_store_refusal(customer=customer, key_id=key_id, exc=exc))
    # The savepoint is never released: COMMIT releases it, and a RELEASE would be one more round trip while a stock
    # row is locked.
    return Placed(order=order)


def idempotency_keys_prune() -> int:
    """Idempotency keys past IDEMPOTENCY_KEY_TTL_SECONDS."""
    return skincare_services.delete_older_than(
        table="idempotency_keys", column="created_at", seconds=settings.IDEMPOTENCY_KEY_TTL_SECONDS
    )
