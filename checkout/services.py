"""Checkout: a customer's items, or their cart, become a ``pending_payment`` order with reserved stock, in one
short transaction. :func:`checkout_place` is the one entry of both checkout endpoints (``checkout.api``), with its
variants: items or a cart, with or without an ``Idempotency-Key``.

The order of the checks is code: :func:`checkout_place` (the checks before the transaction), then the steps of
:data:`OPEN_ORDER` in the transaction, then :func:`order_stock_reserve` last; a refusal rolls back whatever the
checkout wrote (under a key: everything after the key's claim, and the refusal is stored as the key's answer). A
refusal decided before anything was written ends the transaction with COMMIT instead
(``skincare.db.atomic_refusals_commit``: the database is the same, the connection keeps its prepared statements).
The request's own checks (a cart's id, the key's shape, the body's shape and units: 404, 400) come first, in the
view.

The statements' text lives here and nowhere else: :data:`QUOTES_SQL`, :data:`ORDER_SQL`. The locks they take are
lock order steps 3, 4 and 8 (docs/locking.md).
"""

import json
import math
import uuid
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection

from carts import services as cart_services
from checkout import idempotency, ratelimit
from checkout.idempotency import Placed
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
from skincare import validation
from skincare.db import RestartTransaction, atomic_refusals_commit, current_isolation, generic_plans, retry_transient
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


class Checkout:
    """One checkout on its way through :data:`OPEN_ORDER`: what the request asked and what each step learnt.
    Made new for each attempt of the transaction (a restart starts from the request again)."""

    def __init__(
        self, *, customer: User, quantities: dict[int, int], cart_id: uuid.UUID | None, memory_asked: bool
    ) -> None:
        self.customer = customer
        self.quantities = quantities  # product id → units, one entry per product (a cart's: once it is claimed)
        self.cart_id = cart_id
        self.memory_asked = memory_asked  # the sold-out memory was asked already (once per checkout)
        self.quotes: dict[int, Quote] = {}
        self.limits: dict[int, int] = {}  # the limited products' max_per_customer
        self.order_row: tuple[int, datetime, int, Any] | None = None  # ORDER_SQL's answer
        self.order: OrderView | None = None


def checkout_place(
    *,
    customer: User,
    quantities: dict[int, int] | None = None,
    cart_id: uuid.UUID | None = None,
    key: str | None = None,
    fingerprint: str = "",
) -> Placed:
    """The one checkout: a ``pending_payment`` order for ``quantities`` (product id → units, merged per product:
    ``skincare.validation.merge_quantities``) or for the customer's open cart ``cart_id``, its stock reserved until
    its deadline (``now() + RESERVATION_TTL_SECONDS`` by the database clock); under an ``Idempotency-Key``
    (``key``, with ``fingerprint`` naming the request) answered once and replayed after.

    The steps, in order: a checkout of items without a key asks the sold-out memory first (no statement, so a
    refusal is not counted by the rate limit; a key's stored answer or a cart's items must be read before it);
    the rate limit (``checkout.ratelimit``, its own transaction); then one transaction (:func:`_place`): the key's
    claim (``checkout.idempotency``), the steps of :data:`OPEN_ORDER`, the key's answer stored, and the stock
    reserved last. A refusal raises its DomainError; under a key a client error is the stored answer instead.
    """
    if (quantities is None) == (cart_id is None):
        raise TypeError("checkout_place takes quantities or a cart_id, not both")
    memory_asked = False
    if key is None and cart_id is None:
        assert quantities is not None
        refuse_remembered_short(quantities)
        memory_asked = True
    ratelimit.checkout_rate_limit(customer=customer)
    return _place(
        customer=customer,
        quantities=quantities or {},
        cart_id=cart_id,
        key=key,
        fingerprint=fingerprint,
        memory_asked=memory_asked,
    )


@retry_transient
@atomic_refusals_commit
def _place(
    *,
    customer: User,
    quantities: dict[int, int],
    cart_id: uuid.UUID | None,
    key: str | None,
    fingerprint: str,
    memory_asked: bool,
) -> Placed:
    """The checkout's transaction: :func:`order_open`, then :func:`order_stock_reserve` (under a key, inside
    ``checkout.idempotency.run_keyed_checkout``, which claims the key first and stores the answer between them)."""
    state = Checkout(customer=customer, quantities=dict(quantities), cart_id=cart_id, memory_asked=memory_asked)
    if key is None:
        order_open(state)
        return Placed(order=order_stock_reserve(state))
    return idempotency.run_keyed_checkout(
        customer=customer,
        key=key,
        fingerprint=fingerprint,
        open_order=lambda: order_open(state),
        reserve_stock=lambda: order_stock_reserve(state),
    )


def order_open(state: Checkout) -> OrderView:
    """The first phase of a checkout, inside its transaction: every step of :data:`OPEN_ORDER`, in order. The only
    locks it takes are a cart's row, the customer's checkout lock and a queued product's pass;
    :func:`order_stock_reserve` must follow in the same transaction."""
    require_transaction()
    for step in OPEN_ORDER:
        step(state)
    assert state.order is not None  # write_order made it
    return state.order


def order_stock_reserve(state: Checkout) -> OrderView:
    """The second phase of a checkout, in the transaction of its :func:`order_open`: the order's units move from
    available to reserved, by each product's strategy (``inventory.reserve.stock_reserve``). These are the last
    statements before COMMIT: whatever else the transaction writes comes before this call, so nothing lengthens the
    time a stock row is locked. Returns the order."""
    assert state.order is not None
    inventory_reserve.stock_reserve(order_id=state.order.order_id, lines=_reserve_lines(state))
    return state.order


def claim_cart(state: Checkout) -> None:
    """A cart checkout: the customer's open cart claimed (its row lock; 404, 409 ``cart_checked_out``, 410
    ``cart_expired``), its items the checkout's, merged (400 over ``CHECKOUT_MAX_QTY``)."""
    if state.cart_id is not None:
        items = cart_services.cart_claim(customer=state.customer, cart_id=state.cart_id)
        state.quantities = validation.merge_quantities(items, max_qty=settings.CHECKOUT_MAX_QTY)


def ask_sold_out_memory(state: Checkout) -> None:
    """The sold-out memory, unless a checkout of items without a key asked it before its transaction."""
    if not state.memory_asked:
        refuse_remembered_short(state.quantities)
        state.memory_asked = True


def refuse_remembered_short(quantities: dict[int, int]) -> None:
    """A product this worker saw short of the asked quantity within the sold-out memory's window is refused (409
    ``stock_conflict``) without a statement (``inventory.soldout``)."""
    remembered = soldout.known_short(quantities)
    if remembered:
        raise StockConflict(product_ids=remembered)


def read_quotes(state: Checkout) -> None:
    """:data:`QUOTES_SQL`, which takes the customer's checkout lock; an unknown or inactive product is refused
    (422 ``invalid_product``)."""
    generic_plans()  # the checkout's statements, from the quote read on, are planned once per connection
    with connection.cursor() as cursor:
        cursor.execute(
            QUOTES_SQL,
            {
                "customer_lock": advisory_key("customer_checkout", state.customer.pk),
                "product_ids": list(state.quantities),
            },
        )
        names = [column.name for column in cursor.description]
        state.quotes = {row[0]: Quote.from_row(dict(zip(names, row, strict=True))) for row in cursor.fetchall()}
    missing = sorted(set(state.quantities) - set(state.quotes))
    if missing:
        raise InvalidProduct(product_ids=missing)


def refuse_outside_sale_window(state: Checkout) -> None:
    """410 ``sale_ended`` if a product's window has closed (retrying cannot help), else 409 ``sale_not_started`` if
    one has not opened yet, with ``Retry-After`` the whole seconds until the last of them opens (at least 1). Both by
    the state QUOTES_SQL computed with this transaction's ``now()``; nothing is written before."""
    quotes = state.quotes
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


def use_admission(state: Checkout) -> None:
    """A product with a waiting room (docs/queue.md): the customer's admission is used (409
    ``admission_required``, 410 ``admission_expired``: ``waitingroom.admission``); one more statement, only for a
    product that has a queue."""
    queued = [pid for pid, quote in state.quotes.items() if quote.queued]
    if queued:
        admission.admission_use(customer=state.customer, quantities={pid: state.quantities[pid] for pid in queued})


def refuse_visibly_short(state: Checkout) -> None:
    """A product whose visible stock is below the asked units: 409 ``stock_conflict``, and the sold-out memory
    remembers it."""
    short = sorted(pid for pid, quote in state.quotes.items() if quote.available < state.quantities[pid])
    if short:
        for pid in short:
            soldout.remember_short(pid, available_at_most=state.quotes[pid].available)
        raise StockConflict(product_ids=short)


def restart_at_strategy_isolation(state: Checkout) -> None:
    """A product whose strategy needs another isolation level (``serializable`` at READ COMMITTED): nothing is
    written yet, so the transaction starts over at that level (``skincare.db.RestartTransaction``)."""
    isolation = isolation_required(quote.strategy for quote in state.quotes.values())
    if isolation is not None and current_isolation() != isolation:
        raise RestartTransaction("a product's strategy needs another isolation level", isolation=isolation)


def refuse_over_limit_in_request(state: Checkout) -> None:
    """More than a product's ``max_per_customer`` in this one request: 409 ``purchase_limit_exceeded`` (no need to
    look at earlier orders). Keeps the limits for :data:`ORDER_SQL`, which reads the customer's units of those."""
    state.limits = {pid: q.max_per_customer for pid, q in state.quotes.items() if q.max_per_customer is not None}
    over = sorted(pid for pid, limit in state.limits.items() if state.quantities[pid] > limit)
    if over:
        raise PurchaseLimitExceeded(product_ids=over)


def write_order(state: Checkout) -> None:
    """:data:`ORDER_SQL` writes the order's rows and reads the customer's counts; it decides the sale window again
    by its own statement's clock (410 ``sale_ended`` once a window closed while the checkout waited, nothing
    written)."""
    quantities, quotes = state.quantities, state.quotes
    product_ids = sorted(quantities)
    total = sum((quotes[pid].price * quantities[pid] for pid in product_ids), Decimal(0))
    with connection.cursor() as cursor:
        cursor.execute(
            ORDER_SQL,
            {
                **ORDER_SQL_CONSTANTS,
                "customer_id": state.customer.pk,
                "ttl_seconds": settings.RESERVATION_TTL_SECONDS,
                "total": total,
                "product_ids": product_ids,
                "qtys": [quantities[pid] for pid in product_ids],
                "prices": [quotes[pid].price for pid in product_ids],
                "limited_ids": sorted(state.limits),
                "max_pending": settings.MAX_PENDING_ORDERS_PER_CUSTOMER,
            },
        )
        row = cursor.fetchone()
    if row is None:
        raise SaleEnded(product_ids=sorted(pid for pid in product_ids if quotes[pid].sale is not None))
    state.order_row = row
    order_id, deadline, _open_orders, _held = row
    state.order = OrderView(
        order_id=order_id,
        customer_id=state.customer.pk,
        status=Order.Status.PENDING_PAYMENT,
        cancel_reason=None,
        payment_expires_at=deadline,
        total=total,
        lines=tuple(OrderLineView(pid, quantities[pid], quotes[pid].price) for pid in product_ids),
    )


def refuse_over_limit_with_orders(state: Checkout) -> None:
    """The limited products' units with the customer's open and paid orders, as ORDER_SQL read them: over
    ``max_per_customer``, 409 ``purchase_limit_exceeded`` (the order's rows roll back)."""
    if not state.limits:
        return
    assert state.order_row is not None
    held = state.order_row[3]
    # Django hands jsonb back as text on a raw cursor (its ORM decodes JSONField values itself).
    held_units = json.loads(held) if isinstance(held, str) else (held or {})
    over = sorted(
        pid for pid, limit in state.limits.items() if held_units.get(str(pid), 0) + state.quantities[pid] > limit
    )
    if over:
        raise PurchaseLimitExceeded(product_ids=over)


def refuse_too_many_pending(state: Checkout) -> None:
    """The customer's open unpaid orders, as ORDER_SQL counted them: ``MAX_PENDING_ORDERS_PER_CUSTOMER`` or more,
    409 ``too_many_pending_orders``."""
    assert state.order_row is not None
    cap = settings.MAX_PENDING_ORDERS_PER_CUSTOMER
    if cap > 0 and state.order_row[2] >= cap:
        raise TooManyPendingOrders(max_pending_orders=cap)


def link_cart(state: Checkout) -> None:
    """A cart checkout: the cart names its order (before the stock, so nothing is added while a stock row is
    locked)."""
    if state.cart_id is not None:
        assert state.order is not None
        cart_services.cart_order_link(cart_id=state.cart_id, order_id=state.order.order_id)


# The order of a checkout's steps inside its transaction, every variant (plain, keyed, from a cart): each step reads
# what the earlier ones learnt and refuses or adds to it. Under a key the key's claim comes first
# (``checkout.idempotency``); the stock is reserved after the last of these (:func:`order_stock_reserve`).
OPEN_ORDER: tuple[Callable[[Checkout], None], ...] = (
    claim_cart,
    ask_sold_out_memory,
    read_quotes,
    refuse_outside_sale_window,
    use_admission,
    refuse_visibly_short,
    restart_at_strategy_isolation,
    refuse_over_limit_in_request,
    write_order,
    refuse_over_limit_with_orders,
    refuse_too_many_pending,
    link_cart,
)


def _reserve_lines(state: Checkout) -> list[ReserveLine]:
    """What ``stock_reserve`` needs of each product, ascending id: what the quote read said about it."""
    return [
        ReserveLine(
            product_id=pid,
            qty=state.quantities[pid],
            strategy=state.quotes[pid].strategy,
            version=state.quotes[pid].version_sum,
            bucket_count=state.quotes[pid].bucket_count,
            stock_rows=state.quotes[pid].stock_rows,
        )
        for pid in sorted(state.quantities)
    ]
