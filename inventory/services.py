"""Every write to stock counters goes through this module.

Each function changes ``available_stock``/``reserved_stock`` with a guarded update (``WHERE available_stock >= q``
and the like: the database re-checks the guard under the row lock) and writes one ``stock_movements`` row per
product in the same transaction. Ledger rows are written here by :func:`_ledger`, except a checkout's reserve rows,
which the checkout's one INSERT statement writes (``payments.checkout``) before it calls :func:`stock_reserve`.
Rows are locked in ascending ``product_id`` order, as the last statements before COMMIT (the lock order is in
``skincare.locks``). The building blocks used inside a checkout or an order transition run with
``savepoint=False``: they join the caller's transaction without SAVEPOINT/RELEASE round trips, and a failure aborts
that whole transaction.
"""

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple

from django.conf import settings
from django.contrib.auth.models import User
from django.db import OperationalError, connection, transaction
from django.db.models import F
from django.db.models.functions import Now

from inventory import soldout
from inventory.exceptions import (
    InventoryCorrupted,
    LockBusy,
    ProductNotFound,
    StaleStockVersion,
    StockConflict,
    StockWouldGoNegative,
)
from inventory.models import Inventory, InventoryStrategy, Product, StockMovement
from skincare.db import RetryTransaction, sqlstate
from skincare.errors import InvalidInput
from skincare.locks import advisory_xact_lock, require_transaction

Reason = StockMovement.Reason


class LedgerRow(NamedTuple):
    product_id: int
    available_delta: int
    reserved_delta: int
    order_id: int | None = None


# (order_id, product_id, qty): one order's units of one product, as reservations hold them.
OrderLineQty = tuple[int, int, int]


def _ledger(*, rows: Iterable[LedgerRow], reason: str, actor: User | None = None, note: str = "") -> None:
    """Append ledger rows (every stock change's, but a checkout's reserve rows: see the module docstring)."""
    StockMovement.objects.bulk_create(
        [
            StockMovement(
                product_id=row.product_id,
                available_delta=row.available_delta,
                reserved_delta=row.reserved_delta,
                reason=reason,
                order_id=row.order_id,
                actor=actor,
                note=note,
            )
            for row in rows
        ]
    )


def _guarded_update(*, product_id: int, guard: dict[str, Any], **changes: Any) -> int:
    """One UPDATE of one inventory row, only where ``guard`` holds. Returns the number of rows changed."""
    return Inventory.objects.filter(product_id=product_id, **guard).update(
        version=F("version") + 1, updated_at=Now(), **changes
    )


# A reservation: the guarded UPDATE every inventory strategy ends with. PostgreSQL re-checks ``available_stock >=
# qty`` on the newest row version once it holds the row lock, so two buyers cannot both take the last unit.
RESERVE_SQL = """
UPDATE inventories
   SET available_stock = available_stock - %(qty)s,
       reserved_stock = reserved_stock + %(qty)s,
       version = version + 1,
       updated_at = statement_timestamp()
 WHERE product_id = %(product_id)s
   AND available_stock >= %(qty)s
"""
# The optimistic strategy's reservation: the same, only while the row is still at the version the checkout read.
RESERVE_AT_VERSION_SQL = RESERVE_SQL + "   AND version = %(version)s\n"


class ReserveLine(NamedTuple):
    """One product of a reservation, with what the checkout read about it (``strategy``, and the ``version`` seen
    for an optimistic product)."""

    product_id: int
    qty: int
    strategy: str = InventoryStrategy.GUARDED_UPDATE
    version: int | None = None


def _lock_rows(*, product_ids: list[int], nowait: bool) -> dict[int, int]:
    """``SELECT … FOR NO KEY UPDATE [NOWAIT]`` of the inventory rows, ascending; returns available stock by id.
    With NOWAIT a row that another transaction holds is :class:`LockBusy` (409) at once instead of a wait."""
    rows = (
        Inventory.objects.select_for_update(no_key=True, nowait=nowait)
        .filter(product_id__in=product_ids)
        .order_by("product_id")
        .values_list("product_id", "available_stock")
    )
    if not nowait:
        return dict(rows)
    try:
        return dict(rows)
    except OperationalError as exc:
        if sqlstate(exc) == "55P03":
            raise LockBusy(product_ids=product_ids) from exc
        raise


def _refuse_short(*, lines: Sequence[ReserveLine], available: Mapping[int, int]) -> None:
    short = [line.product_id for line in lines if available.get(line.product_id, 0) < line.qty]
    for pid in short:
        soldout.remember_short(pid, available_at_most=available.get(pid, 0))
    if short:
        raise StockConflict(product_ids=short)


def _guarded_reserve(line: ReserveLine) -> None:
    """The step every strategy ends with: the guarded UPDATE (at the version seen, for an optimistic product)."""
    params: dict[str, Any] = {"product_id": line.product_id, "qty": line.qty}
    optimistic = line.strategy == InventoryStrategy.OPTIMISTIC and line.version is not None
    if optimistic:
        params["version"] = line.version
    with connection.cursor() as cursor:
        cursor.execute(RESERVE_AT_VERSION_SQL if optimistic else RESERVE_SQL, params)
        changed = cursor.rowcount
    if changed:
        return
    if optimistic:
        # Either the stock ran out or someone changed the row since we read it: let the runner try again from
        # the start (a fresh read decides which); after the bound the customer gets 409 stock_conflict.
        raise RetryTransaction(
            "optimistic version check lost",
            give_up=StockConflict(product_ids=[line.product_id], gave_up_after=settings.INVENTORY_OPTIMISTIC_ATTEMPTS),
            max_attempts=settings.INVENTORY_OPTIMISTIC_ATTEMPTS,
        )
    soldout.remember_short(line.product_id, available_at_most=line.qty - 1)
    raise StockConflict(product_ids=[line.product_id])


@transaction.atomic(savepoint=False)
def stock_reserve(*, lines: Sequence[ReserveLine]) -> None:
    """Move units from available to reserved, one :class:`ReserveLine` per product, each by its product's strategy
    (docs/strategies.md):

    * ``guarded_update``, ``serializable``: the guarded UPDATE alone (the caller runs ``serializable`` at that
      isolation level);
    * ``row_lock`` / ``row_lock_nowait``: ``SELECT … FOR NO KEY UPDATE`` (``NOWAIT``: 409 ``lock_busy`` if busy),
      then the guarded UPDATE;
    * ``optimistic``: the guarded UPDATE with ``version = <seen>``; a lost race reruns the transaction;
    * ``advisory``: ``pg_advisory_xact_lock`` on the product's key, then the guarded UPDATE.

    Several products (the cart rule): advisory keys of the cart's advisory products (ascending), then every row
    locked in ascending id with ``FOR NO KEY UPDATE`` (``NOWAIT`` if any product is ``row_lock_nowait``), then
    the guarded UPDATEs. The version check is not used there: the rows are already locked.

    The caller has written the reserve ledger rows in this transaction already, so the inventory row locks are
    taken by the last statements before COMMIT. Raises :class:`StockConflict` naming every product that is short;
    the caller's transaction (ledger rows included) then rolls back.
    """
    require_transaction()
    lines = sorted(lines)
    advisory = [line.product_id for line in lines if line.strategy == InventoryStrategy.ADVISORY]
    if advisory:
        advisory_xact_lock(space="inventory_product", idents=advisory)
    if len(lines) > 1:
        # Several rows: lock them all in ascending id order first, so that no two checkouts can each hold
        # one row the other needs, and so that the conflict can name every short product.
        nowait = any(line.strategy == InventoryStrategy.ROW_LOCK_NOWAIT for line in lines)
        _refuse_short(lines=lines, available=_lock_rows(product_ids=[line.product_id for line in lines], nowait=nowait))
        for line in lines:
            _guarded_reserve(line._replace(version=None))
        return
    (line,) = lines
    if line.strategy in (InventoryStrategy.ROW_LOCK, InventoryStrategy.ROW_LOCK_NOWAIT):
        available = _lock_rows(product_ids=[line.product_id], nowait=line.strategy == InventoryStrategy.ROW_LOCK_NOWAIT)
        _refuse_short(lines=lines, available=available)
    # For the other strategies this guarded UPDATE is the whole protection: it takes the row lock and re-checks
    # available_stock (and, optimistic, the version) under it.
    _guarded_reserve(line)


def _move_reserved(*, lines: Sequence[OrderLineQty], reason: str, back_to_available: bool) -> None:
    """Take units out of ``reserved_stock`` (and back into ``available_stock`` when ``back_to_available``).
    ``lines`` are (order_id, product_id, qty): one summed guarded update per product, ascending, and one
    ledger row per line so that every unit stays traceable to its order."""
    require_transaction()
    totals: dict[int, int] = {}
    for _order_id, product_id, qty in lines:
        totals[product_id] = totals.get(product_id, 0) + qty
    # Ledger first, counters last (as in stock_reserve): the inventory row locks are then held only for the
    # guarded updates and the COMMIT. A failed guard raises and rolls the ledger rows back with everything else.
    _ledger(
        rows=[
            LedgerRow(product_id, qty if back_to_available else 0, -qty, order_id)
            for order_id, product_id, qty in sorted(lines, key=lambda line: (line[1], line[0]))
        ],
        reason=reason,
    )
    for product_id in sorted(totals):
        qty = totals[product_id]
        changes: dict[str, Any] = {"reserved_stock": F("reserved_stock") - qty}
        if back_to_available:
            changes["available_stock"] = F("available_stock") + qty
        if not _guarded_update(product_id=product_id, guard={"reserved_stock__gte": qty}, **changes):
            raise InventoryCorrupted(product_ids=[product_id])


@transaction.atomic(savepoint=False)
def stock_release(*, lines: Sequence[OrderLineQty], reason: str) -> None:
    """Return reserved units to available (reservations expired or cancelled)."""
    if reason not in (Reason.EXPIRE, Reason.CANCEL):
        raise ValueError(f"stock_release cannot record reason {reason!r}")
    _move_reserved(lines=lines, reason=reason, back_to_available=True)


@transaction.atomic(savepoint=False)
def stock_consume(*, lines: Sequence[OrderLineQty]) -> None:
    """Reserved units leave the shop: their orders were paid."""
    _move_reserved(lines=lines, reason=Reason.CONSUME, back_to_available=False)


@transaction.atomic
def stock_adjust(
    *, product_id: int, delta: int, note: str, actor: User | None = None, reason: str = Reason.ADJUSTMENT
) -> Inventory:
    """Add ``delta`` (may be negative) to available stock with an F-expression. Refused if the result
    would be negative. Concurrent checkouts keep their reservations: nothing is overwritten."""
    if reason not in (Reason.ADJUSTMENT, Reason.RESTOCK):
        raise ValueError(f"stock_adjust cannot record reason {reason!r}")
    if not note or not note.strip():
        raise ValueError("a stock adjustment needs a reason note")
    if delta == 0:
        raise ValueError("a stock adjustment needs a non-zero delta")
    # Ledger row first, the counter last (as everywhere in this module); a refused update rolls the row back.
    _ledger(rows=[LedgerRow(product_id, delta, 0)], reason=reason, actor=actor, note=note.strip())
    updated = _guarded_update(
        product_id=product_id,
        guard={"available_stock__gte": -delta} if delta < 0 else {},
        available_stock=F("available_stock") + delta,
    )
    if not updated:
        if not Inventory.objects.filter(product_id=product_id).exists():
            raise ProductNotFound(product_id=product_id)
        raise StockWouldGoNegative(product_id=product_id, requested=delta)
    return Inventory.objects.get(product_id=product_id)


@transaction.atomic
def stock_set_counted(
    *, product_id: int, counted: int, expected_version: int, note: str, actor: User | None = None
) -> Inventory:
    """Set available stock to a counted figure, but only if the row is still at ``expected_version`` (the
    version the ops form was loaded with). Otherwise raise :class:`StaleStockVersion` and write nothing."""
    if counted < 0:
        raise StockWouldGoNegative(product_id=product_id, requested=counted)
    if not note or not note.strip():
        raise ValueError("a stock count needs a reason note")
    try:
        inventory = Inventory.objects.select_for_update(no_key=True).get(product_id=product_id)
    except Inventory.DoesNotExist:
        raise ProductNotFound(product_id=product_id) from None
    if inventory.version != expected_version:
        raise StaleStockVersion(product_id=product_id, expected_version=expected_version, version=inventory.version)
    delta = counted - inventory.available_stock
    if delta == 0:
        return inventory
    _ledger(rows=[LedgerRow(product_id, delta, 0)], reason=Reason.COUNT, actor=actor, note=note.strip())
    _guarded_update(product_id=product_id, guard={"version": expected_version}, available_stock=counted)
    inventory.refresh_from_db()
    return inventory


@transaction.atomic
def product_create(
    *,
    sku: str,
    name: str,
    price: Decimal,
    initial_stock: int = 0,
    is_active: bool = True,
    inventory_strategy: str = InventoryStrategy.GUARDED_UPDATE,
    actor: User | None = None,
    product_id: int | None = None,
    max_per_customer: int | None = None,
) -> Product:
    """Create a product with its inventory row; initial stock is recorded in the ledger as a restock.
    ``max_per_customer`` caps the units one customer may hold (None = no limit)."""
    if initial_stock < 0:
        raise StockWouldGoNegative(product_id=None, requested=initial_stock)
    fields: dict[str, Any] = {
        "sku": sku,
        "name": name,
        "price": price,
        "is_active": is_active,
        "inventory_strategy": inventory_strategy,
        "max_per_customer": max_per_customer,
    }
    if product_id is not None:
        fields["id"] = product_id
    product = Product.objects.create(**fields)
    Inventory.objects.create(product=product, available_stock=initial_stock)
    if initial_stock:
        _ledger(
            rows=[LedgerRow(product.pk, initial_stock, 0)], reason=Reason.RESTOCK, actor=actor, note="initial stock"
        )
    return product


@transaction.atomic
def product_sale_set(
    *,
    product_id: int,
    starts_at: datetime | None,
    ends_at: datetime | None,
    sale_price: Decimal | None,
    max_per_customer: int | None,
) -> Product:
    """Set (or clear, with all three None) a product's sale window, its sale price and its per-customer limit.

    Times are absolute; callers that think in "starts in N seconds" add N to ``skincare.db.db_now()`` (the
    database clock that checkouts compare them with). Safe during a sale: a checkout reads the window in the same
    statement as its stock and price, so each checkout sees either the old window or the new one, never a mix.
    Bad values raise ``InvalidInput`` and write nothing."""
    problems = []
    if starts_at is not None and ends_at is not None and ends_at <= starts_at:
        problems.append("the sale must end after it starts")
    if sale_price is not None and sale_price < 0:
        problems.append("the sale price must not be negative")
    if sale_price is not None and starts_at is None and ends_at is None:
        problems.append("a sale price needs a sale window (a start, an end or both)")
    if max_per_customer is not None and max_per_customer < 1:
        problems.append("max_per_customer must be at least 1 (or empty for no limit)")
    if problems:
        raise InvalidInput("; ".join(problems).capitalize() + ".", fields={"sale": problems})
    updated = Product.objects.filter(pk=product_id).update(
        sale_starts_at=starts_at,
        sale_ends_at=ends_at,
        sale_price=sale_price,
        max_per_customer=max_per_customer,
        updated_at=Now(),
    )
    if not updated:
        raise ProductNotFound(product_id=product_id)
    return Product.objects.get(pk=product_id)
