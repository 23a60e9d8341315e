"""Checkout: a customer's items become a ``pending_payment`` order with reserved stock, in one short transaction.

This module is the checkout after the API view (``payments/api.py``), for ``POST /v1/checkout`` and, through
``carts.services``, for ``POST /v1/carts/<id>/checkout``. It has two phases, which always run in that order and in
one transaction:

* :func:`order_open` checks, then writes everything but the stock in one statement (:data:`ORDER_SQL`): the order,
  its lines, its reservations (naming bucket 0) and the payment attempt. It returns an :class:`OpenOrder`.
* :func:`order_stock_reserve` then moves the units from available to reserved (``inventory.reserve.stock_reserve``,
  by each product's strategy and stock buckets: docs/strategies.md): each reserve statement updates one stock row,
  writes its reserve ledger row and, when it took another bucket, names that bucket on the reservation. The stock
  rows it locks are the last statements before COMMIT.

:func:`checkout` runs the two in one ``@retry_transient @atomic_refusals_commit`` transaction (``skincare.db``:
deadlocks and serialization failures retried, timeouts → 503; a refusal decided before anything was written ends
the transaction with COMMIT, which leaves the database as ROLLBACK would and keeps the connection's prepared
statements). Under an ``Idempotency-Key``,
:func:`run_keyed_checkout` is the one flow of both endpoints (:func:`checkout_idempotent` here,
``carts.services.cart_checkout_idempotent`` for a cart): the key is claimed first, the 201 answer is stored between
the two phases, and a client error is stored instead of the order.

A checkout checks in this order; a refusal rolls back whatever the checkout wrote (the whole transaction, or under a
key everything after the key's claim, and the refusal is stored as the key's answer instead). A refusal of an
unkeyed checkout that has written nothing yet (steps 3 to 5 unless an admission was used, and step 6's
``sale_ended``, whose statement wrote no row) ends with COMMIT instead, which leaves the same database and keeps the
connection's prepared statements (``skincare.db.atomic_refusals_commit``):

1. in the view: a cart's id (404), the ``Idempotency-Key`` header and the body's shape (400), then the rate limit
   (429, counted in its own transaction);
2. a keyed checkout's key (:func:`replay`: 422 ``idempotency_key_reused``, 409 in progress), then a cart's claim
   (404, 409 ``cart_checked_out``, 410 ``cart_expired``);
3. more than ``CHECKOUT_MAX_QTY`` units of a product (400, :func:`merge_quantities`);
4. a product this worker saw sold out in the last ``SOLD_OUT_CACHE_MS`` (409 ``stock_conflict``, no query);
5. :data:`QUOTES_SQL`, which takes the customer's checkout lock: an unknown or inactive product (422), then a product
   outside its sale window (410 ``sale_ended``, else 409 ``sale_not_started`` with ``Retry-After``), then a product
   with a waiting room whose admission the customer cannot use (409 ``admission_required``, 410
   ``admission_expired``: ``waitingroom.admission``, which uses it), then a product visibly short (409
   ``stock_conflict``); a ``serializable`` product at READ COMMITTED starts over at SERIALIZABLE here; more than
   ``max_per_customer`` units in this request (409 ``purchase_limit_exceeded``);
6. :data:`ORDER_SQL` decides the sale window again by its own statement's clock (410 ``sale_ended`` once a window
   closed while the checkout waited, nothing written), writes, and reads the customer's counts: over
   ``max_per_customer`` with the customer's open and paid orders (409 ``purchase_limit_exceeded``), then
   ``MAX_PENDING_ORDERS_PER_CUSTOMER`` (409 ``too_many_pending_orders``);
7. the stock (409 ``stock_conflict``, 409 ``lock_busy``; a lost optimistic version check runs the transaction
   again, up to ``INVENTORY_OPTIMISTIC_ATTEMPTS`` attempts in all).

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

from inventory import reserve as inventory_reserve
from inventory import soldout
from inventory.exceptions import InvalidProduct, SaleEnded, SaleNotStarted, StockConflict
from inventory.models import InventoryStrategy
from inventory.reserve import ReserveLine
from inventory.selectors import (
    SALE_ENDED,
    SALE_SCHEDULED,
    SALE_STATE_SQL,
    SECONDS_TO_START_SQL,
    STOCK_SUM_SQL,
    UNIT_PRICE_SQL,
)
from orders.exceptions import PurchaseLimitExceeded, TooManyPendingOrders
from orders.models import Order, Reservation
from orders.selectors import OrderLineView, OrderView
from payments.exceptions import IdempotencyKeyInProgress, IdempotencyKeyReused, RateLimited
from payments.models import IdempotencyKey, PaymentAttempt
from skincare import services as skincare_services
from skincare.db import SERIALIZABLE, IsolationRequired, atomic_refusals_commit, current_isolation, retry_transient
from skincare.errors import DomainError, InvalidInput
from skincare.locks import advisory_key, require_transaction
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
SELECT p.id, {UNIT_PRICE_SQL} AS price, COALESCE(stock.available_stock, 0) AS available,
       p.inventory_strategy AS strategy, COALESCE(stock.version_sum, 0) AS version_sum, p.max_per_customer,
       {SALE_STATE_SQL} AS sale, p.sale_starts_at, {SECONDS_TO_START_SQL} AS seconds_to_start,
       p.stock_buckets AS bucket_count, COALESCE(stock.stock_rows, 1) AS stock_rows,
       EXISTS (SELECT 1 FROM product_queues q WHERE q.product_id = p.id) AS queued,
       (SELECT 1 FROM pg_advisory_xact_lock(%(customer_lock)s)) AS customer_locked
FROM products p
{STOCK_SUM_SQL}
WHERE p.id = ANY(%(product_ids)s) AND p.is_active
"""

# One statement writes the order, its lines, its reservations and the payment attempt (one round trip instead of
# four), and reads what the per-customer checks need: the customer's open unpaid orders
# (when MAX_PENDING_ORDERS_PER_CUSTOMER is on) and their units of the limited products in open and paid orders (when
# the cart has any): a count that is off is not read at all. Those reads see the snapshot from the start of
# this statement: every order the customer's earlier checkouts committed, none of the rows written here.
# ``now()`` is the transaction's start: the order's deadline and every reservation's expiry are that one instant
# by the database's clock. An order whose window closed is not open any more, even before the sweeper cancels it.
ORDER_SQL = """
WITH new_order AS (
    INSERT INTO orders (customer_id, status, payment_expires_at, total, currency, created_at, updated_at)
    SELECT %(customer_id)s, %(pending_payment)s, now() + make_interval(secs => %(ttl_seconds)s), %(total)s,
           %(currency)s, statement_timestamp(), statement_timestamp()
    -- The sale window decided again by this statement's own clock (the quote used the transaction's start, and
    -- waits since may have outlasted sale_ends_at): nothing at all is written once a window has closed.
    WHERE NOT EXISTS (SELECT 1 FROM products p
                       WHERE p.id = ANY(%(product_ids)s::bigint[]) AND p.sale_ends_at <= statement_timestamp())
    RETURNING id, total, created_at, payment_expires_at
), line AS (
    SELECT * FROM unnest(%(product_ids)s::bigint[], %(qtys)s::integer[], %(prices)s::numeric[])
        AS line(product_id, qty, unit_price)
), new_lines AS (
    INSERT INTO order_lines (order_id, product_id, qty, unit_price)
    SELECT new_order.id, line.product_id, line.qty, line.unit_price FROM new_order, line
), new_reservations AS (
    -- bucket 0, a one-row product's only stock row; the reserve statement that takes a bucketed product's units
    -- names the bucket it took (inventory.reserve), and writes the reserve ledger row
    INSERT INTO inventory_reservations (order_id, product_id, qty, bucket, status, expires_at, created_at,
                                        updated_at)
    SELECT new_order.id, line.product_id, line.qty, 0, %(active)s, new_order.payment_expires_at,
           new_order.created_at, new_order.created_at
    FROM new_order, line
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
    "attempt_pending": PaymentAttempt.Status.PENDING.value,
    "currency": settings.SHOP_CURRENCY,  # the shop's currency (checked at start-up, skincare.E012)
}


class Quote(NamedTuple):
    """What :data:`QUOTES_SQL` says about one product (its columns by name: :meth:`from_row`)."""

    price: Decimal  # the unit price to charge: the sale price inside an open sale window
    available: int
    strategy: str
    version_sum: int  # the sum of its stock rows' versions: bucket 0's version when it is the only row
    max_per_customer: int | None
    sale: str | None  # scheduled | open | ended by this transaction's clock; None without a window
    sale_starts_at: datetime | None
    seconds_to_start: Decimal | None  # scheduled only
    bucket_count: int  # the product's stock_buckets (K)
    stock_rows: int  # its stock rows (more than K while rows left by a lowered K still hold units)
    queued: bool  # it has a waiting room: checkout needs the customer's admission (docs/queue.md)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "Quote":
        return cls(**{field: row[field] for field in cls._fields})


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
@atomic_refusals_commit
def checkout(*, customer: User, items: Iterable[tuple[int, int]]) -> OrderView:
    """Place a ``pending_payment`` order for ``items`` ((product_id, qty) pairs) and reserve its stock until its
    deadline (``now() + RESERVATION_TTL_SECONDS`` by the database clock): :func:`order_open`, then
    :func:`order_stock_reserve`, in one transaction.

    Raises InvalidInput (400), InvalidProduct (422), StockConflict, LockBusy, PurchaseLimitExceeded,
    TooManyPendingOrders, SaleNotStarted (409), SaleEnded (410); ``retry_transient`` turns lock timeouts into
    ServiceBusy (503).
    """
    return order_stock_reserve(opened=order_open(customer=customer, items=items))


class OpenOrder(NamedTuple):
    """An order written by :func:`order_open` whose stock is not reserved yet."""

    order: OrderView
    stock: list[ReserveLine]  # what order_stock_reserve reserves, one line per product


def order_open(*, customer: User, items: Iterable[tuple[int, int]]) -> OpenOrder:
    """The first phase of a checkout, inside the caller's ``@retry_transient @transaction.atomic`` service: the checks
    up to the stock (steps 3 to 6 of the module docstring), then the order's rows. The only lock it takes is the
    customer's checkout lock; :func:`order_stock_reserve` must follow in the same transaction."""
    require_transaction()
    return OpenOrder(*_open_order(customer=customer, quantities=merge_quantities(items)))


def _open_order(*, customer: User, quantities: dict[int, int]) -> tuple[OrderView, list[ReserveLine]]:
    """:func:`order_open` once the items are merged: the early refusals, then the order's rows, in the order of the
    module docstring. Returns the order and what ``stock_reserve`` needs."""
    remembered = soldout.known_short(quantities)
    if remembered:
        raise StockConflict(product_ids=remembered)

    with connection.cursor() as cursor:
        cursor.execute(
            QUOTES_SQL,
            {"customer_lock": advisory_key("customer_checkout", customer.pk), "product_ids": list(quantities)},
        )
        names = [column.name for column in cursor.description]
        quotes = {row[0]: Quote.from_row(dict(zip(names, row, strict=True))) for row in cursor.fetchall()}
    missing = sorted(set(quantities) - set(quotes))
    if missing:
        raise InvalidProduct(product_ids=missing)
    _refuse_outside_sale_window(quotes)
    queued = [pid for pid, quote in quotes.items() if quote.queued]
    if queued:  # the waiting room (docs/queue.md): one more statement, only for a product that has a queue
        admission.admission_use(customer=customer, product_ids=queued)
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
                "limited_ids": sorted(limits),
                "max_pending": settings.MAX_PENDING_ORDERS_PER_CUSTOMER,
            },
        )
        row = cursor.fetchone()
    if row is None:  # a window closed while this checkout waited (ORDER_SQL's re-check): 410, nothing written
        raise SaleEnded(product_ids=sorted(pid for pid in product_ids if quotes[pid].sale is not None))
    order_id, deadline, open_orders, held = row
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
            product_id=pid,
            qty=quantities[pid],
            strategy=quotes[pid].strategy,
            version=quotes[pid].version_sum,
            bucket_count=quotes[pid].bucket_count,
            stock_rows=quotes[pid].stock_rows,
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


def order_stock_reserve(*, opened: OpenOrder) -> OrderView:
    """The second phase of a checkout, in the transaction of its :func:`order_open`: the order's units move from
    available to reserved, by each product's strategy (``inventory.reserve.stock_reserve``). These are the last
    statements before COMMIT: whatever else the transaction writes comes before this call, so nothing lengthens the
    time a stock row is locked. Returns the order."""
    inventory_reserve.stock_reserve(order_id=opened.order.order_id, lines=opened.stock)
    return opened.order


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


# The first statement of a keyed checkout, and the first lock of the order in skincare.locks. If another transaction
# holds the same new key, PostgreSQL makes this one wait until that one commits (then nothing is returned and the
# stored answer is read) or rolls back (then this one gets the key). A key older than IDEMPOTENCY_KEY_TTL_SECONDS that was not
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
    *, customer: User, key: str, fingerprint: str, open_order: Callable[[], OpenOrder]
) -> KeyedCheckout:
    """The one ``Idempotency-Key`` flow, inside the caller's ``@retry_transient @transaction.atomic`` service: of
    ``POST /v1/checkout`` (:func:`checkout_idempotent`) and of ``POST /v1/carts/<id>/checkout``
    (``carts.services.cart_checkout_idempotent``). ``open_order`` is the caller's first phase: everything it writes
    before the stock (:func:`order_open`; for a cart, the cart's claim and its link to the order too).

    The key is claimed by the transaction's first statement (:data:`CLAIM_KEY_SQL`); a key used before is answered by
    :func:`replay`. Then a savepoint, ``open_order()``, the order stored as the key's 201 answer, and
    :func:`order_stock_reserve`: the answer is stored before the stock is reserved, so no extra statement runs while a
    stock row is locked. A replayable client error (:func:`replayable`: 409 stock_conflict, 422 invalid_product, a
    cart's 404/409/410, …) rolls back to the savepoint and is stored as the answer instead. A retryable error (with
    Retry-After) or a 5xx rolls the whole transaction back, the key included, so a retry with the key runs again.
    """
    require_transaction()
    key_id = claim_key(customer=customer, key=key, fingerprint=fingerprint)
    if key_id is None:
        return replay(customer=customer, key=key, fingerprint=fingerprint)
    savepoint = transaction.savepoint()
    try:
        opened = open_order()
        _store_answer(key_id=key_id, status=201, body=opened.order.to_json())
        order = order_stock_reserve(opened=opened)
    except DomainError as exc:
        if not replayable(exc):
            raise
        # The inner atomic blocks (savepoint=False) marked the transaction for rollback when the error passed
        # through them. Rolling back to the savepoint makes it healthy again, so the mark is lifted (first: Django
        # refuses every statement, the ROLLBACK TO SAVEPOINT included, while it is set) and the refusal is stored.
        transaction.set_rollback(False)
        transaction.savepoint_rollback(savepoint)
        return KeyedCheckout(refusal=_store_refusal(customer=customer, key_id=key_id, exc=exc))
    # The savepoint is never released: COMMIT releases it, and a RELEASE would be one more round trip while a stock
    # row is locked.
    return KeyedCheckout(order=order)


@retry_transient
@atomic_refusals_commit
def checkout_idempotent(
    *, customer: User, items: Iterable[tuple[int, int]], key: str, fingerprint: str
) -> KeyedCheckout:
    """:func:`checkout` under an ``Idempotency-Key`` (scoped to the customer; ``fingerprint`` is the request body's),
    by :func:`run_keyed_checkout`. The same key with another body → IdempotencyKeyReused."""
    return run_keyed_checkout(
        customer=customer,
        key=key,
        fingerprint=fingerprint,
        open_order=lambda: order_open(customer=customer, items=items),
    )


def idempotency_keys_prune() -> int:
    """Idempotency keys past IDEMPOTENCY_KEY_TTL_SECONDS."""
    return skincare_services.delete_older_than(
        table="idempotency_keys", column="created_at", seconds=settings.IDEMPOTENCY_KEY_TTL_SECONDS
    )
