"""Checkout: a customer's items become a ``pending_payment`` order with reserved stock, in one short transaction.

This module is the whole checkout after the API view (``payments/api.py``), top to bottom:

1. :func:`checkout` (or :func:`checkout_idempotent`, under an ``Idempotency-Key``) runs one transaction with the
   runner of ``skincare.db`` (deadlocks and serialization failures retried, timeouts → 503).
2. :func:`_open_order`: a product this worker saw sold out in the last 250 ms is refused with no query; then
   :data:`QUOTES_SQL` reads prices, visible stock and strategies (and takes the customer's checkout lock), refusing
   an unknown or visibly short product before anything is written; then :data:`ORDER_SQL`, one statement, writes the
   order, its lines, its reservations, their ledger rows and the payment attempt, and reads the customer's counts.
3. ``inventory.services.stock_reserve``: the guarded UPDATE of each inventory row, by the product's strategy. The
   hot row is locked by this last statement and released by the COMMIT right after it.

Payments sits at the top of the layers, so this module may know every table the statements touch; their text lives
here and nowhere else (``bench/strategies.py`` builds its pgbench script from these constants). The lock order these
statements follow is in ``skincare.locks``.
"""

import dataclasses
import json
import math
from collections.abc import Callable, Iterable
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction

from inventory import services as inventory_services
from inventory import soldout
from inventory.exceptions import InvalidProduct, SaleEnded, SaleNotStarted, StockConflict
from inventory.models import InventoryStrategy, StockMovement
from inventory.selectors import SALE_ENDED, SALE_SCHEDULED, SALE_STATE_SQL, SECONDS_TO_START_SQL, UNIT_PRICE_SQL
from inventory.services import ReserveLine
from orders.exceptions import PurchaseLimitExceeded, TooManyPendingOrders
from orders.models import Order, Reservation
from orders.selectors import OrderLineView, OrderView
from payments.exceptions import IdempotencyKeyInProgress, IdempotencyKeyReused, RateLimited
from payments.models import IdempotencyKey, PaymentAttempt
from skincare import services as skincare_services
from skincare.db import SERIALIZABLE, IsolationRequired, current_isolation, retry_transient
from skincare.errors import DomainError, InvalidInput
from skincare.locks import advisory_key
from skincare.validation import parse_rate
from waitingroom import admission

# Unit prices, visible stock, strategy, version and per-customer limit of the products that are for sale (unknown
# and inactive ids are absent). An unlocked read: it refuses early, it never decides a sale. The sub-select takes the
# customer's checkout lock (step 3 of the lock order) in the same round trip; the customer's counts are read by the
# next statement, whose snapshot is taken after the lock was granted.
# It also decides the sale window (docs/sale-windows.md): the window's state and the unit price (the sale price
# inside an open window) are computed here with ``now()``, this transaction's start, which is never later than the
# order's created_at: no order is ever created before sale_starts_at. The window's expressions are the product
# API's too (inventory.selectors), so the countdown a client sees and the checkout's decision are one rule.
QUOTES_SQL = f"""
SELECT p.id, {UNIT_PRICE_SQL} AS unit_price, COALESCE(i.available_stock, 0), p.inventory_strategy,
       COALESCE(i.version, 0), p.max_per_customer, {SALE_STATE_SQL} AS sale, p.sale_starts_at,
       {SECONDS_TO_START_SQL} AS seconds_to_start, p.stock_buckets, COALESCE(i.bucket_rows, 1),
       (SELECT 1 FROM pg_advisory_xact_lock(%(customer_lock)s)) AS customer_locked
FROM products p
LEFT JOIN LATERAL (  -- the product's stock rows only (a join with the inventories view would sum every product's)
    SELECT sum(b.available_stock)::integer AS available_stock, sum(b.version)::bigint AS version,
           count(*)::integer AS bucket_rows
      FROM stock_buckets b WHERE b.product_id = p.id
) i ON true
WHERE p.id = ANY(%(product_ids)s) AND p.is_active
"""

# One statement writes the order, its lines, its reservations, their reserve ledger rows and the payment attempt
# (one round trip instead of five), and reads what the per-customer checks need: the customer's open unpaid orders
# (when MAX_PENDING_ORDERS_PER_CUSTOMER is on) and their units of the limited products in open and paid orders (when
# the cart has any): a count that is off is not read at all. Those reads see the snapshot from the start of
# this statement: every order the customer's earlier checkouts committed, none of the rows written here.
# ``now()`` is the transaction's start: the order's deadline and every reservation's expiry are that one instant
# by the database's clock. An order whose window closed is not open any more, even before the sweeper cancels it.
ORDER_SQL = """
WITH new_order AS (
    INSERT INTO orders (customer_id, status, payment_expires_at, total, created_at, updated_at)
    VALUES (%(customer_id)s, %(pending_payment)s, now() + make_interval(secs => %(ttl_seconds)s), %(total)s,
            statement_timestamp(), statement_timestamp())
    RETURNING id, total, created_at, payment_expires_at
), line AS (
    SELECT * FROM unnest(%(product_ids)s::bigint[], %(qtys)s::integer[], %(prices)s::numeric[],
                         %(buckets)s::integer[])
        AS line(product_id, qty, unit_price, buckets)
), new_lines AS (
    INSERT INTO order_lines (order_id, product_id, qty, unit_price)
    SELECT new_order.id, line.product_id, line.qty, line.unit_price FROM new_order, line
), new_reservations AS (
    INSERT INTO inventory_reservations (order_id, product_id, qty, status, expires_at, created_at, updated_at)
    SELECT new_order.id, line.product_id, line.qty, %(active)s, new_order.payment_expires_at,
           new_order.created_at, new_order.created_at
    FROM new_order, line
), reserve_ledger AS (
    -- bucket 0 of a one-row product; a bucketed product's row is written by its claim, which knows the bucket
    INSERT INTO stock_movements (product_id, bucket, available_delta, reserved_delta, reason, order_id, note,
                                 created_at)
    SELECT line.product_id, 0, -line.qty, line.qty, %(reserve)s, new_order.id, '', new_order.created_at
    FROM new_order, line
    WHERE line.buckets = 1
), new_payment_attempt AS (
    INSERT INTO payment_attempts (order_id, status, amount, provider_reference, created_at, updated_at)
    SELECT new_order.id, %(attempt_pending)s, new_order.total, '', new_order.created_at, new_order.created_at
    FROM new_order
)
SELECT new_order.id, new_order.payment_expires_at,
       (SELECT count(*) FROM orders o
         WHERE %(max_pending)s > 0
           AND o.customer_id = %(customer_id)s AND o.status = %(pending_payment)s AND o.payment_expires_at > now()
       ) AS open_orders,
       (SELECT jsonb_object_agg(held.product_id, held.units) FROM (
            SELECT ol.product_id, sum(ol.qty) AS units
              FROM order_lines ol JOIN orders o ON o.id = ol.order_id
             WHERE cardinality(%(limited_ids)s::bigint[]) > 0
               AND o.customer_id = %(customer_id)s
               AND ol.product_id = ANY(%(limited_ids)s::bigint[])
               AND (o.status = %(paid)s OR (o.status = %(pending_payment)s AND o.payment_expires_at > now()))
             GROUP BY ol.product_id) AS held
       ) AS held_units
FROM new_order
"""

# The values of the statuses and reasons ORDER_SQL writes (the models' choices, checked by their constraints).
ORDER_SQL_CONSTANTS = {
    "pending_payment": Order.Status.PENDING_PAYMENT.value,
    "paid": Order.Status.PAID.value,
    "active": Reservation.Status.ACTIVE.value,
    "reserve": StockMovement.Reason.RESERVE.value,
    "attempt_pending": PaymentAttempt.Status.PENDING.value,
}


class Quote(NamedTuple):
    """What :data:`QUOTES_SQL` says about one product."""

    price: Decimal  # the unit price to charge: the sale price inside an open sale window
    available: int
    strategy: str
    version: int
    max_per_customer: int | None
    sale: str | None  # scheduled | open | ended by this transaction's clock; None without a window
    sale_starts_at: datetime | None
    seconds_to_start: Decimal | None  # scheduled only
    buckets: int  # the product's stock_buckets (K)
    bucket_rows: int  # its stock rows (more than K while rows left by a lowered K still hold units)


def merge_quantities(items: Iterable[tuple[int, int]]) -> dict[int, int]:
    """``[(product_id, qty), ...]`` → ``{product_id: total qty}``: a product listed twice is one line, and one order
    holds at most CHECKOUT_MAX_QTY units of a product (400 otherwise)."""
    quantities: dict[int, int] = {}
    for product_id, qty in items:
        quantities[product_id] = quantities.get(product_id, 0) + qty
    too_many = {pid: qty for pid, qty in quantities.items() if qty > settings.CHECKOUT_MAX_QTY}
    if too_many:
        raise InvalidInput(
            f"At most {settings.CHECKOUT_MAX_QTY} units of one product per order.",
            fields={"items": [f"product {pid}: {qty} units" for pid, qty in sorted(too_many.items())]},
        )
    return quantities


@retry_transient
@transaction.atomic
def checkout(*, customer: User, items: Iterable[tuple[int, int]]) -> OrderView:
    """Place a ``pending_payment`` order for ``items`` ((product_id, qty) pairs) and reserve its stock until its
    deadline (``now() + RESERVATION_TTL_SECONDS`` by the database clock).

    Raises InvalidInput (400), InvalidProduct (422), StockConflict, LockBusy, PurchaseLimitExceeded,
    TooManyPendingOrders, SaleNotStarted (409), SaleEnded (410); the runner turns lock timeouts into ServiceBusy
    (503).
    """
    order, reserve = _open_order(customer=customer, quantities=merge_quantities(items))
    _reserve_stock(order, reserve)
    return order


def _open_order(*, customer: User, quantities: dict[int, int]) -> tuple[OrderView, list[ReserveLine]]:
    """Everything before the stock: the early refusals, then the order's rows. Returns the order and what
    ``stock_reserve`` needs. Per-customer checks, in this order (docs/reliability.md): visibly short (409
    stock_conflict), unknown product (422), outside its sale window (410 sale_ended / 409 sale_not_started), ``max_per_customer`` (409 purchase_limit_exceeded),
    ``MAX_PENDING_ORDERS_PER_CUSTOMER`` (409 too_many_pending_orders); the guarded UPDATE comes after."""
    remembered = soldout.known_short(quantities)
    if remembered:
        raise StockConflict(product_ids=remembered)

    with connection.cursor() as cursor:
        cursor.execute(
            QUOTES_SQL,
            {"customer_lock": advisory_key("customer_checkout", customer.pk), "product_ids": list(quantities)},
        )
        quotes = {row[0]: Quote(*row[1:11]) for row in cursor.fetchall()}
    missing = sorted(set(quantities) - set(quotes))
    if missing:
        raise InvalidProduct(product_ids=missing)
    _refuse_outside_sale_window(quotes)
    admission.admission_use(customer=customer, product_ids=list(quotes))  # the waiting room (docs/queue.md)
    short = sorted(pid for pid, quote in quotes.items() if quote.available < quantities[pid])
    if short:
        for pid in short:
            soldout.remember_short(pid, available_at_most=quotes[pid].available)
        raise StockConflict(product_ids=short)
    if current_isolation() != SERIALIZABLE and any(
        q.strategy == InventoryStrategy.SERIALIZABLE for q in quotes.values()
    ):
        raise IsolationRequired(SERIALIZABLE)  # nothing written yet: the runner starts over at SERIALIZABLE
    limits = {pid: quote.max_per_customer for pid, quote in quotes.items() if quote.max_per_customer is not None}
    over = sorted(pid for pid, limit in limits.items() if quantities[pid] > limit)
    if over:  # more than the limit in this one request: no need to look at earlier orders
        raise PurchaseLimitExceeded(product_ids=over)

    product_ids = sorted(quantities)
    total = sum((quotes[pid].price * quantities[pid] for pid in product_ids), Decimal(0))
    with connection.cursor() as cursor:
        cursor.execute(
            ORDER_SQL,
            {
                **ORDER_SQL_CONSTANTS,
                "customer_id": customer.pk,
                "ttl_seconds": settings.RESERVATION_TTL_SECONDS,
                "total": total,
                "product_ids": product_ids,
                "qtys": [quantities[pid] for pid in product_ids],
                "prices": [quotes[pid].price for pid in product_ids],
                "buckets": [quotes[pid].buckets for pid in product_ids],
                "limited_ids": sorted(limits),
                "max_pending": settings.MAX_PENDING_ORDERS_PER_CUSTOMER,
            },
        )
        order_id, deadline, open_orders, held = cursor.fetchone()
    # A refusal below rolls back the rows just written, with the rest of the transaction.
    if limits:
        # Django hands jsonb back as text on a raw cursor (its ORM decodes JSONField values itself).
        held_units = json.loads(held) if isinstance(held, str) else (held or {})
        over = sorted(pid for pid, limit in limits.items() if held_units.get(str(pid), 0) + quantities[pid] > limit)
        if over:
            raise PurchaseLimitExceeded(product_ids=over)
    cap = settings.MAX_PENDING_ORDERS_PER_CUSTOMER
    if cap > 0 and open_orders >= cap:
        raise TooManyPendingOrders(max_pending_orders=cap)

    order = OrderView(
        order_id=order_id,
        customer_id=customer.pk,
        status=Order.Status.PENDING_PAYMENT,
        cancel_reason=None,
        payment_expires_at=deadline,
        total=total,
        lines=tuple(OrderLineView(pid, quantities[pid], quotes[pid].price) for pid in product_ids),
    )
    reserve = [
        ReserveLine(
            pid,
            quantities[pid],
            quotes[pid].strategy,
            quotes[pid].version,
            quotes[pid].buckets,
            quotes[pid].bucket_rows,
        )
        for pid in product_ids
    ]
    return order, reserve


def _refuse_outside_sale_window(quotes: dict[int, Quote]) -> None:
    """410 ``sale_ended`` if a product's window has closed (retrying cannot help), else 409 ``sale_not_started`` if
    one has not opened yet, with ``Retry-After`` the whole seconds until the last of them opens (at least 1). Both by
    the state QUOTES_SQL computed with this transaction's ``now()``; nothing is written before."""
    ended = [pid for pid, quote in quotes.items() if quote.sale == SALE_ENDED]
    if ended:
        raise SaleEnded(product_ids=ended)
    scheduled = [pid for pid, quote in quotes.items() if quote.sale == SALE_SCHEDULED]
    if scheduled:
        last = max((quotes[pid] for pid in scheduled), key=lambda quote: quote.seconds_to_start or 0)
        assert last.sale_starts_at is not None and last.seconds_to_start is not None  # scheduled: both are set
        raise SaleNotStarted(
            product_ids=scheduled,
            starts_at=last.sale_starts_at,
            retry_after_seconds=math.ceil(last.seconds_to_start),
        )


def _reserve_stock(order: OrderView, lines: list[ReserveLine]) -> None:
    """The last statements before COMMIT: the stock rows, by each product's strategy (``inventory.services``)."""
    inventory_services.stock_reserve(order_id=order.order_id, lines=lines)


def checkout_in_transaction(
    *,
    customer: User,
    items: Iterable[tuple[int, int]],
    before_reserve: Callable[[OrderView], None] | None = None,
) -> OrderView:
    """The checkout's statements inside the caller's ``@retry_transient @transaction.atomic`` service, for a caller
    that takes its own lock first in the same transaction (``carts.services.cart_checkout`` claims its cart).
    ``before_reserve`` runs after the order is written and before the stock is reserved, so whatever it writes does
    not lengthen the hot row's lock."""
    order, reserve = _open_order(customer=customer, quantities=merge_quantities(items))
    if before_reserve is not None:
        before_reserve(order)
    _reserve_stock(order, reserve)
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


# --- Idempotent checkout (the Idempotency-Key header: IETF httpapi draft, Stripe semantics) ---------------------


class Refusal(NamedTuple):
    """A refusal given under an ``Idempotency-Key``: stored with the key and replayed as it was."""

    http_status: int
    body: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class KeyedCheckout:
    """The answer to a keyed checkout: the order placed, or the refusal; ``replayed`` when it is the stored answer
    of an earlier request with the same key."""

    order: OrderView | None = None
    refusal: Refusal | None = None
    replayed: bool = False


# The first statement of a keyed checkout (step 1 of the lock order). If another transaction holds the same new
# key, PostgreSQL makes this one wait until that one commits (then nothing is returned and the stored answer is
# read) or rolls back (then this one gets the key). A key older than IDEMPOTENCY_KEY_TTL_SECONDS that was not
# pruned yet is taken over as if it were new.
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


def replay(*, customer: User, key: str, fingerprint: str) -> KeyedCheckout:
    """The stored answer of an earlier request with ``key``; another body under the same key is refused."""
    stored = IdempotencyKey.objects.filter(customer=customer, key=key).first()
    if stored is None or stored.fingerprint != fingerprint:
        raise IdempotencyKeyReused(idempotency_key=key)
    if stored.response_status is None or stored.response_body is None:
        raise IdempotencyKeyInProgress(idempotency_key=key)
    if stored.response_status >= 400:
        return KeyedCheckout(refusal=Refusal(stored.response_status, stored.response_body), replayed=True)
    return KeyedCheckout(order=OrderView.from_json(stored.response_body, customer_id=customer.pk), replayed=True)


def store_answer(*, key_id: int, status: int, body: dict[str, Any]) -> None:
    IdempotencyKey.objects.filter(pk=key_id).update(response_status=status, response_body=body)


def store_refusal(*, customer: User, key_id: int, exc: DomainError) -> Refusal:
    """Store a replayable refusal as the answer of the claimed key (the caller rolled its checkout back to the
    savepoint taken after the claim), keeping the customer's stored refusals bounded."""
    refusal = Refusal(exc.http_status, exc.body())
    store_answer(key_id=key_id, status=refusal.http_status, body=refusal.body)
    with connection.cursor() as cursor:
        cursor.execute(
            TRIM_REFUSALS_SQL,
            {"customer_id": customer.pk, "keep": settings.IDEMPOTENCY_MAX_STORED_REFUSALS},
        )
    return refusal


@retry_transient
@transaction.atomic
def checkout_idempotent(
    *, customer: User, items: Iterable[tuple[int, int]], key: str, fingerprint: str
) -> KeyedCheckout:
    """:func:`checkout` under an ``Idempotency-Key`` (scoped to the customer; ``fingerprint`` is the request body's).

    The key is claimed by the first statement. The checkout runs after a savepoint: a client error (409
    stock_conflict, 422 invalid_product, …) rolls back to it and the refusal is stored instead; the order is stored
    before the stock is reserved, so no extra statement runs while the inventory row is locked. A retryable error or
    a 5xx rolls everything back, the key included. The same key with another body → IdempotencyKeyReused.
    """
    key_id = claim_key(customer=customer, key=key, fingerprint=fingerprint)
    if key_id is None:
        return replay(customer=customer, key=key, fingerprint=fingerprint)
    savepoint = transaction.savepoint()
    try:
        order, reserve = _open_order(customer=customer, quantities=merge_quantities(items))
        store_answer(key_id=key_id, status=201, body=order.to_json())
        _reserve_stock(order, reserve)
    except DomainError as exc:
        if not replayable(exc):
            raise
        # The inner atomic blocks (savepoint=False) marked the transaction for rollback when the error passed
        # through them. Rolling back to the savepoint makes it healthy again, so the mark is lifted (first: Django
        # refuses every statement, the ROLLBACK TO SAVEPOINT included, while it is set) and the refusal is stored.
        transaction.set_rollback(False)
        transaction.savepoint_rollback(savepoint)
        return KeyedCheckout(refusal=store_refusal(customer=customer, key_id=key_id, exc=exc))
    # The savepoint is never released: COMMIT releases it, and a RELEASE would be one more round trip while the
    # inventory row is locked.
    return KeyedCheckout(order=order)


def idempotency_keys_prune() -> int:
    """Idempotency keys past IDEMPOTENCY_KEY_TTL_SECONDS."""
    return skincare_services.delete_older_than(
        table="idempotency_keys", column="created_at", seconds=settings.IDEMPOTENCY_KEY_TTL_SECONDS
    )
