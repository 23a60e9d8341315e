"""Checkout: a customer's items become a ``pending_payment`` order with reserved stock, in one short transaction.

The checkout after the API view (``payments/api.py``), for ``POST /v1/checkout`` and, through ``carts.services``, for
``POST /v1/carts/<id>/checkout``. Two phases, always in that order and in one transaction:

* :func:`order_open` checks, then writes everything but the stock in one statement (:data:`ORDER_SQL`): the order,
  its lines, its reservations (naming bucket 0) and the payment attempt. It returns an :class:`OpenOrder`.
* :func:`order_stock_reserve` then moves the units from available to reserved (``inventory.reserve.stock_reserve``,
  docs/strategies.md). The stock rows it locks are the last statements before COMMIT.

:func:`checkout` runs the two in one ``@retry_transient @atomic_refusals_commit`` transaction (``skincare.db``: the
transaction restarted on its one restart signal, timeouts → 503; a refusal decided before anything was written ends
the transaction with COMMIT, which leaves the database as ROLLBACK would and keeps the connection's prepared
statements); the checks that make no statement (steps 3 and 4 below) come first, outside it, so a product
remembered sold out is refused without entering the transaction or its runner. Under an ``Idempotency-Key`` the same
phases run inside ``payments.idempotency.run_keyed_checkout`` (steps 3 and 4 after the key's claim, so a key is
answered as it was stored); the rate limit is ``payments.ratelimit``.

A checkout checks in this order; a refusal rolls back whatever the checkout wrote (the whole transaction, or under a
key everything after the key's claim, and the refusal is stored as the key's answer instead). A refusal of an
unkeyed checkout that has written nothing yet (steps 3 to 5 unless an admission was used, and step 6's
``sale_ended``, whose statement wrote no row) ends with COMMIT instead (``skincare.db.atomic_refusals_commit``):

1. in the view: a cart's id (404), the ``Idempotency-Key`` header and the body's shape (400), then the rate limit
   (429, counted in its own transaction); an unkeyed ``POST /v1/checkout`` makes steps 3 and 4 first, before the
   rate limit (:func:`checkout_quantities`): a refusal that takes nothing and asks the database nothing is not
   counted;
2. a keyed checkout's key (``payments.idempotency.replay``: 422 ``idempotency_key_reused``, 409 in progress), then
   a cart's claim (404, 409 ``cart_checked_out``, 410 ``cart_expired``);
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
here and nowhere else. The locks they take are lock order steps 3, 4 and 8 (docs/locking.md).
"""

import json
import math
from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection

from inventory import reserve as inventory_reserve
from inventory import soldout
from inventory.exceptions import InvalidProduct, SaleEnded, SaleNotStarted, StockConflict
from inventory.reserve import ReserveLine
from inventory.selectors import (
    SALE_ENDED,
    SALE_SCHEDULED,
    SALE_STATE_SQL,
    SECONDS_TO_START_SQL,
    STOCK_SUM_SQL,
    UNIT_PRICE_SQL,
)
from inventory.strategies import isolation_required
from orders.exceptions import PurchaseLimitExceeded, TooManyPendingOrders
from orders.models import Order
from orders.selectors import OrderLineView, OrderView
from orders.services import ORDER_ROWS_CONSTANTS, ORDER_ROWS_SQL
from payments.models import PaymentAttempt
from skincare.db import RestartTransaction, atomic_refusals_commit, current_isolation, generic_plans, retry_transient
from skincare.errors import InvalidInput
from skincare.locks import advisory_key, require_transaction
from waitingroom import admission

# Unit prices, visible stock, strategy, version and per-customer limit of the products that are for sale (unknown
# and inactive ids are absent). An unlocked read: it refuses early, it never decides a sale. The sub-select takes the
# customer's checkout lock (lock order step 3) in the same round trip; the customer's counts are read by the
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

# One statement writes the order, its lines and its reservations (``orders.services.ORDER_ROWS_SQL``) and the
# payment attempt (one round trip instead of four), and reads what the per-customer checks need: the customer's open
# unpaid orders (when MAX_PENDING_ORDERS_PER_CUSTOMER is on) and their units of the limited products in open and paid
# orders (when the cart has any): a count that is off is not read at all. Those reads see the snapshot from the start
# of this statement: every order the customer's earlier checkouts committed, none of the rows written here.
# An order whose window closed is not open any more, even before the sweeper cancels it.
ORDER_SQL = f"""
WITH {ORDER_ROWS_SQL.strip()}, new_payment_attempt AS (
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

# The values of the statuses ORDER_SQL writes and reads (the models' choices, checked by their constraints).
ORDER_SQL_CONSTANTS = {
    **ORDER_ROWS_CONSTANTS,
    "paid": Order.Status.PAID.value,
    "attempt_pending": PaymentAttempt.Status.PENDING.value,
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


def checkout(*, customer: User, items: Iterable[tuple[int, int]]) -> OrderView:
    """Place a ``pending_payment`` order for ``items`` ((product_id, qty) pairs) and reserve its stock until its
    deadline (``now() + RESERVATION_TTL_SECONDS`` by the database clock): :func:`order_open`, then
    :func:`order_stock_reserve`, in one transaction (:func:`checkout_transaction`).

    Steps 3 and 4 of the module docstring's checks make no statement, so they are decided here, before the
    transaction and its runner: a product remembered sold out is refused without entering either.

    Raises InvalidInput (400), InvalidProduct (422), StockConflict, LockBusy, PurchaseLimitExceeded,
    TooManyPendingOrders, SaleNotStarted (409), SaleEnded (410); ``retry_transient`` turns lock timeouts into
    ServiceBusy (503).
    """
    return checkout_transaction(customer=customer, items=checkout_quantities(items).items())


def checkout_quantities(items: Iterable[tuple[int, int]]) -> dict[int, int]:
    """Steps 3 and 4 of the module docstring's checks, which make no statement: the items merged per product
    (:func:`merge_quantities`), and a product remembered sold out refused (:func:`refuse_remembered_short`)."""
    quantities = merge_quantities(items)
    refuse_remembered_short(quantities)
    return quantities


@retry_transient
@atomic_refusals_commit
def checkout_transaction(*, customer: User, items: Iterable[tuple[int, int]]) -> OrderView:
    """The transaction of :func:`checkout`: :func:`order_open`, then :func:`order_stock_reserve`."""
    return order_stock_reserve(opened=order_open(customer=customer, items=items))


def refuse_remembered_short(quantities: dict[int, int]) -> None:
    """Step 4 of the module docstring's checks: a product this worker saw short of the asked quantity within the
    sold-out memory's window is refused (409 ``stock_conflict``) without a statement (``inventory.soldout``)."""
    remembered = soldout.known_short(quantities)
    if remembered:
        raise StockConflict(product_ids=remembered)


class OpenOrder(NamedTuple):
    """An order written by :func:`order_open` whose stock is not reserved yet."""

    order: OrderView
    stock: list[ReserveLine]  # what order_stock_reserve reserves, one line per product


def order_open(*, customer: User, items: Iterable[tuple[int, int]]) -> OpenOrder:
    """The first phase of a checkout, inside the caller's ``@retry_transient @transaction.atomic`` service: the checks
    up to the stock (steps 3 to 6 of the module docstring: :func:`_read_quotes`, :func:`_refuse_by_quotes`), then the
    order's rows (:func:`_write_order`). The only lock it takes is the customer's checkout lock (and a queued
    product's pass); :func:`order_stock_reserve` must follow in the same transaction."""
    require_transaction()
    quantities = merge_quantities(items)
    quotes = _read_quotes(customer=customer, quantities=quantities)
    limits = _refuse_by_quotes(customer=customer, quantities=quantities, quotes=quotes)
    order = _write_order(customer=customer, quantities=quantities, quotes=quotes, limits=limits)
    return OpenOrder(order, _reserve_lines(quantities=quantities, quotes=quotes))


def _read_quotes(*, customer: User, quantities: dict[int, int]) -> dict[int, Quote]:
    """Steps 4 and 5 of the module docstring's checks, first half: the sold-out memory
    (:func:`refuse_remembered_short`, no statement; a checkout without a key or a cart asked it before its
    transaction), then :data:`QUOTES_SQL` (which takes the customer's checkout lock); an unknown or inactive product
    is refused."""
    refuse_remembered_short(quantities)
    generic_plans()  # the checkout's statements, from the quote read on, are planned once per connection
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
    return quotes


def _refuse_by_quotes(*, customer: User, quantities: dict[int, int], quotes: dict[int, Quote]) -> dict[int, int]:
    """Step 5's refusals, decided by the quotes before anything is written, in the module docstring's order. Returns
    the per-customer limits of the limited products (``ORDER_SQL`` reads the customer's units of those)."""
    _refuse_outside_sale_window(quotes)
    queued = [pid for pid, quote in quotes.items() if quote.queued]
    if queued:  # the waiting room (docs/queue.md): one more statement, only for a product that has a queue
        admission.admission_use(customer=customer, quantities={pid: quantities[pid] for pid in queued})
    short = sorted(pid for pid, quote in quotes.items() if quote.available < quantities[pid])
    if short:
        for pid in short:
            soldout.remember_short(pid, available_at_most=quotes[pid].available)
        raise StockConflict(product_ids=short)
    isolation = isolation_required(quote.strategy for quote in quotes.values())
    if isolation is not None and current_isolation() != isolation:  # nothing written yet: start over at that level
        raise RestartTransaction("a product's strategy needs another isolation level", isolation=isolation)
    limits = {pid: quote.max_per_customer for pid, quote in quotes.items() if quote.max_per_customer is not None}
    over = sorted(pid for pid, limit in limits.items() if quantities[pid] > limit)
    if over:  # more than the limit in this one request: no need to look at earlier orders
        raise PurchaseLimitExceeded(product_ids=over)
    return limits


def _write_order(
    *, customer: User, quantities: dict[int, int], quotes: dict[int, Quote], limits: dict[int, int]
) -> OrderView:
    """Step 6: :data:`ORDER_SQL` writes the order's rows, then the customer's counts are checked (a refusal rolls the
    rows back with the rest of the transaction). Returns the order."""
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
    _refuse_by_customer_counts(quantities=quantities, limits=limits, open_orders=open_orders, held=held)
    return OrderView(
        order_id=order_id,
        customer_id=customer.pk,
        status=Order.Status.PENDING_PAYMENT,
        cancel_reason=None,
        payment_expires_at=deadline,
        total=total,
        lines=tuple(OrderLineView(pid, quantities[pid], quotes[pid].price) for pid in product_ids),
    )


def _refuse_by_customer_counts(
    *, quantities: dict[int, int], limits: dict[int, int], open_orders: int, held: Any
) -> None:
    """Step 6's refusals by what ORDER_SQL read: the limited products' units with the customer's open and paid orders
    (409 ``purchase_limit_exceeded``), then the customer's open orders (409 ``too_many_pending_orders``)."""
    if limits:
        # Django hands jsonb back as text on a raw cursor (its ORM decodes JSONField values itself).
        held_units = json.loads(held) if isinstance(held, str) else (held or {})
        over = sorted(pid for pid, limit in limits.items() if held_units.get(str(pid), 0) + quantities[pid] > limit)
        if over:
            raise PurchaseLimitExceeded(product_ids=over)
    cap = settings.MAX_PENDING_ORDERS_PER_CUSTOMER
    if cap > 0 and open_orders >= cap:
        raise TooManyPendingOrders(max_pending_orders=cap)


def _reserve_lines(*, quantities: dict[int, int], quotes: dict[int, Quote]) -> list[ReserveLine]:
    """What ``stock_reserve`` needs of each product, ascending id: what the quote read said about it."""
    return [
        ReserveLine(
            product_id=pid,
            qty=quantities[pid],
            strategy=quotes[pid].strategy,
            version=quotes[pid].version_sum,
            bucket_count=quotes[pid].bucket_count,
            stock_rows=quotes[pid].stock_rows,
        )
        for pid in sorted(quantities)
    ]


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
