"""The inventory strategies as data (docs/strategies.md): what a product's strategy (``products.inventory_strategy``)
adds to the guarded update every strategy ends with. Nothing here runs SQL: ``inventory.plan`` reads a line's
:class:`Strategy` (:func:`strategy_of`) to plan its reservation, and the checkout asks at which isolation level its
transaction runs (:func:`isolation_required`).

Every strategy ends with the same guarded update, the reserve statement of ``inventory.reserve``, which takes the
stock row lock and re-checks ``available_stock >= qty`` under it; a strategy only adds a step before it, or a
condition to it.

========================  =============================================================================
``guarded_update``        nothing: the guarded update alone decides
``row_lock``              ``SELECT … FOR NO KEY UPDATE`` of the stock row first (waits its turn), refused at
                          once when the locked row is short
``row_lock_nowait``       the same with ``NOWAIT``: a held row is 409 ``lock_busy`` at once
``optimistic``            nothing; the update also requires the version the checkout read, and a lost check
                          runs the whole transaction again (bounded)
``advisory``              the product's advisory key (lock order step 7), with the order's other ones, ascending
``serializable``          nothing; the whole transaction runs at SERIALIZABLE
========================  =============================================================================

A multi-product order of one-row products locks its stock rows together (``NOWAIT`` when one of its strategies says
so) and checks no version; the advisory keys are still taken first.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from inventory.models import InventoryStrategy
from skincare.db import SERIALIZABLE


@dataclass(frozen=True)
class Strategy:
    """What a product's inventory strategy adds around the guarded update. The defaults are ``guarded_update``'s:
    nothing."""

    name: str
    advisory_key: bool = False  # takes the product's advisory key before any stock row (lock order step 7)
    row_lock: bool = False  # locks its stock row (SELECT … FOR NO KEY UPDATE) before the update, refusing a short one
    nowait: bool = False  # its stock row lock answers lock_busy instead of waiting
    checks_version: bool = False  # the update also requires the version the quote read (a one-product order only)
    isolation: str | None = None  # the checkout's transaction runs at this level (None: READ COMMITTED)


S = InventoryStrategy
STRATEGIES: dict[str, Strategy] = {
    strategy.name: strategy
    for strategy in (
        Strategy(S.GUARDED_UPDATE),
        Strategy(S.ROW_LOCK, row_lock=True),
        Strategy(S.ROW_LOCK_NOWAIT, row_lock=True, nowait=True),
        Strategy(S.OPTIMISTIC, checks_version=True),
        Strategy(S.ADVISORY, advisory_key=True),
        Strategy(S.SERIALIZABLE, isolation=SERIALIZABLE),
    )
}


class HasStrategy(Protocol):
    @property
    def strategy(self) -> str: ...


def strategy_of(line: HasStrategy) -> Strategy:
    """The strategy of ``line``'s product; an unknown name is an error (the column's constraint allows none)."""
    try:
        return STRATEGIES[line.strategy]
    except KeyError:
        raise ValueError(f"unknown inventory strategy {line.strategy!r}") from None


def isolation_required(strategies: Iterable[str]) -> str | None:
    """The isolation level a checkout of products with these strategies must run at (None: the default)."""
    levels = {STRATEGIES[name].isolation for name in strategies}
    return SERIALIZABLE if SERIALIZABLE in levels else None
