"""Carts: created, replaced and checked out by their customer; expired by the database clock; pruned.

A cart holds no stock, and creating or replacing one locks no stock row: its items get the checkout's input checks
(the body's shape in the view, then ``skincare.validation.merge_quantities`` and one unlocked read of the products
for sale: 400, 422), and only the cart's own rows are written. Stock is reserved when the cart is checked out.

A cart is checked out by the checkout (``checkout.services.checkout_place``), in whose transaction
:func:`cart_claim` claims it by one conditional UPDATE (``… WHERE status = 'open' AND expires_at > now()``), its
first lock after the idempotency key, if any (the lock order is in docs/locking.md), and :func:`cart_order_link`
names its order. Concurrent checkouts of one cart queue on its row, and once the winner commits every other one
finds it ``checked_out`` (409 with its order id); a refusal rolls the claim back, so the cart stays open.
"""

import uuid
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction

from carts.exceptions import CartCheckedOut, CartExpired, CartNotFound, TooManyOpenCarts
from carts.models import Cart, CartItem
from carts.selectors import CartLine, CartView
from inventory import selectors as inventory_selectors
from inventory.exceptions import InvalidProduct
from skincare.db import retry_transient
from skincare.errors import DomainError
from skincare.locks import advisory_key, require_transaction
from skincare.validation import merge_quantities


def _validated_lines(items: Iterable[tuple[int, int]]) -> list[CartLine]:
    """The cart's lines, validated as a checkout validates them: one line per product and at most CHECKOUT_MAX_QTY
    units of it (400, ``skincare.validation.merge_quantities``), every product known and for sale (422). One
    unlocked read of prices and stock."""
    quantities = merge_quantities(items, max_qty=settings.CHECKOUT_MAX_QTY)
    products = inventory_selectors.products_for_sale(product_ids=list(quantities))
    missing = sorted(set(quantities) - set(products))
    if missing:
        raise InvalidProduct(product_ids=missing)
    return [
        CartLine(
            product_id=pid,
            qty=quantities[pid],
            unit_price=products[pid].unit_price,
            available_stock=products[pid].available_stock,
            sale=products[pid].sale,
        )
        for pid in sorted(quantities)
    ]


def _insert_items(*, cart_id: uuid.UUID, lines: list[CartLine]) -> None:
    CartItem.objects.bulk_create(
        [CartItem(cart_id=cart_id, product_id=line.product_id, qty=line.qty) for line in lines]
    )


_INSERT_CART_SQL = """
INSERT INTO carts (id, customer_id, status, expires_at, created_at, updated_at)
VALUES (%(id)s, %(customer_id)s, %(status)s, now() + make_interval(secs => %(ttl)s), now(), now())
RETURNING expires_at
"""


# Open carts per customer are capped (MAX_OPEN_CARTS_PER_CUSTOMER): counted after taking the customer's checkout
# lock (step 3 of docs/locking.md; a create takes no other lock, and inserts only new rows), so concurrent creates of
# one customer queue and the cap is exact. The count is its own statement, whose snapshot follows the lock.
_OPEN_CARTS_SQL = """
SELECT count(*) FROM carts WHERE customer_id = %(customer_id)s AND status = %(open)s AND expires_at > now()
"""


def _refuse_too_many_open_carts(*, customer: User) -> None:
    cap = settings.MAX_OPEN_CARTS_PER_CUSTOMER
    if cap <= 0:
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [advisory_key("customer_checkout", customer.pk)])
        cursor.execute(_OPEN_CARTS_SQL, {"customer_id": customer.pk, "open": Cart.Status.OPEN.value})
        (open_carts,) = cursor.fetchone()
    if open_carts >= cap:
        raise TooManyOpenCarts(max_open_carts=cap)


@retry_transient
@transaction.atomic
def cart_create(*, customer: User, items: Iterable[tuple[int, int]]) -> CartView:
    """A new open cart of ``customer`` expiring CART_TTL_SECONDS from now (database clock). Raises InvalidInput
    (too many units of a product) or InvalidProduct before anything is written."""
    lines = _validated_lines(items)
    _refuse_too_many_open_carts(customer=customer)
    cart_id = uuid.uuid4()
    with connection.cursor() as cursor:
        cursor.execute(
            _INSERT_CART_SQL,
            {
                "id": cart_id,
                "customer_id": customer.pk,
                "status": Cart.Status.OPEN.value,
                "ttl": settings.CART_TTL_SECONDS,
            },
        )
        (expires_at,) = cursor.fetchone()
    _insert_items(cart_id=cart_id, lines=lines)
    return CartView(
        cart_id=cart_id, status=Cart.Status.OPEN, expires_at=expires_at, expired=False, order_id=None, lines=lines
    )


def _refusal(*, customer: User, cart_id: uuid.UUID) -> DomainError:
    """Why a cart of ``customer`` could not be claimed: it does not exist (or is someone else's), it was checked out
    (naming its order), or it expired. Read after the claim found no row, so it sees the state that refused it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT status, order_id FROM carts WHERE id = %s AND customer_id = %s", [cart_id, customer.pk])
        row = cursor.fetchone()
    if row is None:
        return CartNotFound(cart_id=str(cart_id))
    status, order_id = row
    if status == Cart.Status.CHECKED_OUT:
        return CartCheckedOut(cart_id=str(cart_id), order_id=order_id)
    return CartExpired(cart_id=str(cart_id))


# The claim of an open, unexpired cart: the first lock of a replace or a checkout, after a keyed checkout's
# idempotency key (docs/locking.md). A concurrent claimer waits here for the row; READ COMMITTED then re-checks the
# WHERE on the committed version.
_TOUCH_SQL = """
UPDATE carts SET expires_at = now() + make_interval(secs => %(ttl)s), updated_at = now()
WHERE id = %(id)s AND customer_id = %(customer_id)s AND status = %(open)s AND expires_at > now()
RETURNING expires_at
"""
_CLAIM_SQL = """
UPDATE carts SET status = %(checked_out)s, updated_at = now()
WHERE id = %(id)s AND customer_id = %(customer_id)s AND status = %(open)s AND expires_at > now()
RETURNING id
"""


@retry_transient
@transaction.atomic
def cart_replace(*, customer: User, cart_id: uuid.UUID, items: Iterable[tuple[int, int]]) -> CartView:
    """Replace the items of the customer's open cart and move its expiry to CART_TTL_SECONDS from now.

    Raises CartNotFound, CartExpired, CartCheckedOut, InvalidInput, InvalidProduct; any refusal rolls the whole
    transaction back, so nothing is written (the expiry is not moved either)."""
    params: dict[str, Any] = {
        "id": cart_id,
        "customer_id": customer.pk,
        "open": Cart.Status.OPEN.value,
        "ttl": settings.CART_TTL_SECONDS,
    }
    with connection.cursor() as cursor:
        cursor.execute(_TOUCH_SQL, params)
        row = cursor.fetchone()
    if row is None:
        raise _refusal(customer=customer, cart_id=cart_id)
    lines = _validated_lines(items)
    CartItem.objects.filter(cart_id=cart_id).delete()
    _insert_items(cart_id=cart_id, lines=lines)
    return CartView(
        cart_id=cart_id, status=Cart.Status.OPEN, expires_at=row[0], expired=False, order_id=None, lines=lines
    )


def cart_claim(*, customer: User, cart_id: uuid.UUID) -> list[tuple[int, int]]:
    """Inside a checkout's transaction: claim the customer's open cart (its row lock, until the transaction ends)
    and return its items (product_id, qty). A cart that is not the customer's, or not open, is refused: 404, 409
    ``cart_checked_out``, 410 ``cart_expired``."""
    require_transaction()
    params: dict[str, Any] = {
        "id": str(cart_id),
        "customer_id": customer.pk,
        "open": Cart.Status.OPEN.value,
        "checked_out": Cart.Status.CHECKED_OUT.value,
    }
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM_SQL, params)
        if cursor.fetchone() is None:
            raise _refusal(customer=customer, cart_id=cart_id)
        cursor.execute("SELECT product_id, qty FROM cart_items WHERE cart_id = %s ORDER BY product_id", [cart_id])
        return [(product_id, qty) for product_id, qty in cursor.fetchall()]


def cart_order_link(*, cart_id: uuid.UUID, order_id: int) -> None:
    """Inside the checkout's transaction that claimed the cart: the cart names the order it became."""
    require_transaction()
    with connection.cursor() as cursor:
        cursor.execute("UPDATE carts SET order_id = %s WHERE id = %s", [order_id, cart_id])


_PRUNE_SQL = """
SELECT id FROM carts
WHERE (status = %(open)s AND expires_at < now() - make_interval(secs => %(keep)s))
   OR (status = %(checked_out)s AND updated_at < now() - make_interval(secs => %(keep)s))
LIMIT %(batch)s
FOR UPDATE SKIP LOCKED
"""


def carts_prune(*, batch_size: int = 1000) -> int:
    """Delete carts that expired, or were checked out, more than CART_RETENTION_SECONDS ago (database clock), with
    their items; until then they answer 410 cart_expired / 409 cart_checked_out rather than 404. Batches of
    ``batch_size``, each its own short transaction; a cart locked right now (being replaced or checked out) is
    skipped, never waited for. Returns how many carts were deleted."""
    params: dict[str, Any] = {
        "open": Cart.Status.OPEN.value,
        "checked_out": Cart.Status.CHECKED_OUT.value,
        "keep": settings.CART_RETENTION_SECONDS,
        "batch": batch_size,
    }
    deleted = 0
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(_PRUNE_SQL, params)
            ids = [row[0] for row in cursor.fetchall()]
            if ids:
                cursor.execute("DELETE FROM cart_items WHERE cart_id = ANY(%s)", [ids])
                cursor.execute("DELETE FROM carts WHERE id = ANY(%s)", [ids])
        deleted += len(ids)
        if len(ids) < batch_size:
            return deleted
