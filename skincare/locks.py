"""The lock order and the advisory-lock keys: the one description of both. ``docs/locking.md`` argues why the
order cannot deadlock and links here for the list; everything else that needs the order names a step of it.

Every transaction that takes more than one lock takes them in this order, and never goes back up:

1. the request's claim, its first statement — a keyed checkout claims its ``idempotency_keys`` row (customer, key)
   with ``INSERT … ON CONFLICT``, so a second request with the same key waits here (``payments.checkout``); a
   webhook claims its ``processed_events`` row (the event id) with ``INSERT … ON CONFLICT DO NOTHING``
   (``payments.services``). No transaction takes both.
2. ``carts`` rows — a cart replace or cart checkout claims its one cart with a conditional ``UPDATE … WHERE status =
   'open' AND expires_at > now()`` (after its idempotency key, if any); the pruner takes carts ``FOR UPDATE SKIP
   LOCKED`` (``carts.services``).
3. the customer's checkout lock — advisory key ``("customer_checkout", customer id)``, taken by the checkout's
   product read so that the per-customer counts are read after the customer's previous checkout committed
   (``payments.checkout``); and by a cart create before it counts the customer's open carts (``carts.services``:
   its first and only lock; it then inserts new rows only).
4. the customer's own ``queue_passes`` row, for a product with a queue — the checkout uses the admission with a
   conditional ``UPDATE … WHERE used_at IS NULL AND admitted_until > now()`` (``waitingroom.admission``). Only this
   customer's checkouts touch it, and they already queue at step 3. The advancer (the sweeper loop) takes a
   ``product_queues`` row ``FOR NO KEY UPDATE SKIP LOCKED``, then rows of *waiting* passes (never an admitted one),
   and no other lock; a join takes only its own new row, ops only the ``product_queues`` row.
5. ``orders`` rows — ``FOR NO KEY UPDATE`` of one order (payment, cancel), or ``… SKIP LOCKED`` of a batch (the
   sweeper), ascending id (``orders.locks``).
6. that order's ``payment_attempts``, then its ``inventory_reservations`` — ``FOR NO KEY UPDATE``, by (order,
   product) (``payments.services``, ``orders.locks``).
7. advisory keys ``("inventory_product", product id)`` of ``advisory``-strategy products, ascending id (checkout
   only); and the ``products`` row whose bucket count K a stock manager changes (``stock_buckets_set``; no checkout
   locks a product row), which the product page's save locks first to check the version it was loaded at
   (``inventory.admin.product_form``; the first lock of the admin's transaction).
8. ``stock_buckets`` rows (the stock rows) — ascending product id, and within one product: a bucket claimed with
   ``SKIP LOCKED`` (never waits), or one bucket waited for (the waiting pass), or all of its buckets in bucket order
   (the full pass, ops changes); guarded ``UPDATE``s, or ``FOR NO KEY UPDATE [NOWAIT]`` of all the bucket-0 rows of a
   multi-product order first. Always the last statements before COMMIT. A transaction that holds a bucket of a
   product never waits for another bucket of that product, except in bucket order.

A checkout's own new rows (order, lines, reservations, attempt, ledger) are invisible to everyone until COMMIT, so
nobody waits for them: a checkout takes steps 1, 3, 4 (a queued product only), 7 and 8, a cart checkout 1, 2, 3, 4,
7 and 8, a payment or a cancel 1 (webhooks only), 5, 6 and 8, the sweeper 5, 6 and 8, an ops stock change 7 (a new
K only) and 8, a cart create 3 only, a product page's save 7. A new lock gets a place in this list (and its argument
in ``docs/locking.md``) before it gets code.

Advisory keys are one bigint: the key space in the top bits, the id below (ids up to 2**47), after pretix's
``KEY_SPACES``. Every advisory lock is transaction-scoped (``pg_advisory_xact_lock``): released by COMMIT or
ROLLBACK, so it works behind a transaction-mode pooler.
"""

from collections.abc import Iterable

from django.db import connection

ADVISORY_KEY_SPACES = {"inventory_product": 1, "customer_checkout": 2}
_ID_BITS = 47


def advisory_key(space: str, ident: int) -> int:
    """The bigint advisory-lock key of ``ident`` in ``space`` (one of :data:`ADVISORY_KEY_SPACES`)."""
    if not 0 < ident < 2**_ID_BITS:
        raise ValueError(f"advisory lock id out of range: {ident}")
    return (ADVISORY_KEY_SPACES[space] << _ID_BITS) | ident


def require_transaction() -> None:
    """Refuse to take locks outside a transaction: in autocommit they would be released at once."""
    if not connection.in_atomic_block:
        raise RuntimeError("locks must be taken inside transaction.atomic()")


def advisory_xact_lock(*, space: str, idents: Iterable[int]) -> None:
    """``pg_advisory_xact_lock`` for each id in ascending order (waiting), one statement per key."""
    require_transaction()
    with connection.cursor() as cursor:
        for ident in sorted(set(idents)):
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [advisory_key(space, ident)])
