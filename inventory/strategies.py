"""The inventory strategies, one small object each (docs/strategies.md): what a product's strategy
(``products.inventory_strategy``) does before the guarded update.

Every strategy ends with the same guarded update, the reserve statement of ``inventory.reserve``, which takes the
stock row lock and re-checks ``available_stock >= qty`` under it; a strategy only adds a step before it, or a
condition to it. ``inventory.reserve.stock_reserve`` asks an order's strategies (:func:`strategy_of`) what they do;
the checkout asks them at which isolation level its transaction runs (:func:`isolation_required`).

========================  =============================================================================
``guarded_update``        nothing: the guarded update alone decides
``row_lock``              ``SELECT … FOR NO KEY UPDATE`` of the stock row (:func:`lock_rows`, waits its turn),
                          refused at once when the locked row is short
``row_lock_nowait``       the same with ``NOWAIT``: a held row is 409 ``lock_busy`` at once
``optimistic``            nothing; the update also requires the version the checkout read, and a lost check
                          runs the whole transaction again (bounded)
``advisory``              the product's advisory key (lock order step 7), with the order's other ones, ascending
``serializable``          nothing; the whole transaction runs at SERIALIZABLE
========================  =============================================================================

A multi-product order locks its stock rows together (:func:`lock_rows`, ``NOWAIT`` when one of its strategies says
so) and checks no version; the advisory keys are still taken first.
"""

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import OperationalError

from inventory import soldout
from inventory.exceptions import LockBusy, StockConflict
from inventory.models import InventoryStrategy, StockBucket
from skincare.db import SERIALIZABLE, RestartTransaction, sqlstate

if TYPE_CHECKING:
    from inventory.reserve import ReserveLine


class Strategy:
    """What a product's inventory strategy does around the guarded update. The defaults are ``guarded_update``'s:
    nothing."""

    name: str
    advisory_key = False  # takes the product's advisory key before any stock row (lock order step 7)
    nowait = False  # its stock row lock answers lock_busy instead of waiting
    isolation: str | None = None  # the checkout's transaction runs at this level (None: READ COMMITTED)

    def before_update(self, line: "ReserveLine") -> None:
        """The step right before the product's guarded update (a product with one stock row, alone or with
        bucketed ones in its order)."""

    def checks_version(self, line: "ReserveLine") -> bool:
        """Whether the guarded update also requires the version the checkout read."""
        return False

    def update_lost(self, line: "ReserveLine") -> None:
        """Bucket 0 came up short for the guarded update of a one-row product: raise, if the strategy decides (else
        the reserve path looks for stock rows added since the quote read, then refuses)."""


class GuardedUpdate(Strategy):
    """Nothing before the guarded update: the UPDATE takes the row lock and re-checks the stock under it."""

    name = InventoryStrategy.GUARDED_UPDATE


class RowLock(Strategy):
    """``SELECT … FOR NO KEY UPDATE`` of the stock row first (waits its turn), and a short row refused under it."""

    name = InventoryStrategy.ROW_LOCK

    def before_update(self, line: "ReserveLine") -> None:
        available = lock_rows(product_ids=[line.product_id], nowait=self.nowait)
        if line.stock_rows == 1:
            refuse_short(lines=[line], available=available)


class RowLockNowait(RowLock):
    """The row lock with ``NOWAIT``: a row another transaction holds is 409 ``lock_busy`` at once."""

    name = InventoryStrategy.ROW_LOCK_NOWAIT
    nowait = True


class Optimistic(Strategy):
    """Nothing before; the guarded update also requires the version the checkout's quote read (a one-product order
    only), and a lost check runs the whole transaction again, up to ``INVENTORY_OPTIMISTIC_ATTEMPTS`` attempts."""

    name = InventoryStrategy.OPTIMISTIC

    def checks_version(self, line: "ReserveLine") -> bool:
        return line.version is not None

    def update_lost(self, line: "ReserveLine") -> None:
        if not self.checks_version(line):
            return
        # Either the stock ran out or someone changed the row since we read it: the runner tries again from the
        # start (a fresh read decides which); after the bound the customer gets 409 stock_conflict.
        raise RestartTransaction(
            "optimistic version check lost",
            give_up=StockConflict(product_ids=[line.product_id], gave_up_after=settings.INVENTORY_OPTIMISTIC_ATTEMPTS),
            max_attempts=settings.INVENTORY_OPTIMISTIC_ATTEMPTS,
        )


class Advisory(Strategy):
    """``pg_advisory_xact_lock`` on the product's key first (transaction-scoped: works behind a transaction-mode
    pooler); taken for every advisory product of the order (lock order step 7)."""

    name = InventoryStrategy.ADVISORY
    advisory_key = True


class Serializable(Strategy):
    """Nothing before the guarded update: the checkout's whole transaction runs at SERIALIZABLE (the checkout
    restarts at that level when its quote read finds such a product)."""

    name = InventoryStrategy.SERIALIZABLE
    isolation = SERIALIZABLE


STRATEGIES: dict[str, Strategy] = {
    strategy.name: strategy
    for strategy in (GuardedUpdate(), RowLock(), RowLockNowait(), Optimistic(), Advisory(), Serializable())
}


def strategy_of(line: "ReserveLine") -> Strategy:
    """The strategy object of ``line``'s product; an unknown name is an error (the column's constraint allows none)."""
    try:
        return STRATEGIES[line.strategy]
    except KeyError:
        raise ValueError(f"unknown inventory strategy {line.strategy!r}") from None


def isolation_required(strategies: Iterable[str]) -> str | None:
    """The isolation level a checkout of products with these strategies must run at (None: the default)."""
    levels = {STRATEGIES[name].isolation for name in strategies}
    return SERIALIZABLE if SERIALIZABLE in levels else None


def lock_rows(*, product_ids: list[int], nowait: bool) -> dict[int, int]:
    """``SELECT … FOR NO KEY UPDATE [NOWAIT]`` of the products' bucket-0 rows, ascending (lock order step 8); returns
    available stock by id. With NOWAIT a row that another transaction holds is :class:`LockBusy` (409) at once instead
    of a wait."""
    rows = (
        StockBucket.objects.select_for_update(no_key=True, nowait=nowait)
        .filter(product_id__in=product_ids, bucket=0)
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


def refuse_short(*, lines: Sequence["ReserveLine"], available: Mapping[int, int]) -> None:
    """Refuse the products whose locked bucket-0 row is short. A short product that has other stock rows now had its K
    raised after the quote read: the transaction runs again from the start, and its fresh quote sends the product
    through the full pass (locking its other rows here would break the lock order: we hold later products' rows)."""
    short = [line.product_id for line in lines if available.get(line.product_id, 0) < line.qty]
    if any(has_other_stock_rows(pid) for pid in short):
        raise RestartTransaction(
            "stock rows added since the quote read",
            give_up=StockConflict(product_ids=short),
            max_attempts=settings.DB_TRANSIENT_RETRIES + 1,
        )
    for pid in short:
        soldout.remember_short(pid, available_at_most=available.get(pid, 0))
    if short:
        raise StockConflict(product_ids=short)


def has_other_stock_rows(product_id: int) -> bool:
    """Whether the product has stock rows besides bucket 0 now (a fresh read, no lock). Asked only when bucket 0 came
    up short for a product the quote saw with one row: K may have been raised since the quote read (ops spreading
    the units while the sale runs), and then the units are in the new rows, not gone. A lost optimistic check never
    asks: its product has one row (buckets are ``guarded_update``'s), and the whole transaction runs again."""
    return StockBucket.objects.filter(product_id=product_id).exclude(bucket=0).exists()
