"""The plan of a checkout's reservation, made without the database (docs/strategies.md): which stock rows, in which
order, by which statement. ``inventory.reserve.stock_reserve`` runs it.

:func:`plan_reservation` reads the order's lines (:class:`ReserveLine`: a product, its quantity, and what the quote
read about it) and each product's strategy (``inventory.strategies``, data), and returns a :class:`Plan`: the
advisory keys to take first, then steps in ascending product id, each one of

* :class:`LockRows`: bucket 0 of some products locked in one statement, the short ones refused;
* :class:`Reserve`: the reserve statement on bucket 0 (at the version read, for a one-product optimistic order);
* :class:`Claim`: a bucketed product's claims, then the full pass.

The rule (docs/strategies.md#a-multi-product-order-with-products-of-different-strategies): several products that
each have one stock row are locked together first, whatever their strategies, and checked at no version; otherwise
each product is planned alone, a ``row_lock`` product's lock right before its update.
"""

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from inventory.strategies import strategy_of


class ReserveLine(NamedTuple):
    """One product of a reservation, with what the checkout read about it: ``strategy``, the ``version`` seen (the
    sum over the product's stock rows: bucket 0's own version when it is the only row; used by an optimistic
    product), ``bucket_count`` (K, the buckets it sells from) and ``stock_rows`` (its stock rows; more than K while
    rows left by a lowered K still hold units)."""

    product_id: int
    qty: int
    strategy: str = "guarded_update"
    version: int | None = None
    bucket_count: int = 1
    stock_rows: int = 1


class Statement(enum.Enum):
    """The reserve statements of ``inventory.reserve``, by the name of the constant that holds each."""

    RESERVE = "RESERVE_SQL"
    RESERVE_AT_VERSION = "RESERVE_AT_VERSION_SQL"
    CLAIM_BUCKET = "CLAIM_BUCKET_SQL"
    CLAIM_WAITING = "CLAIM_WAITING_SQL"


# Waiting claims of a bucketed product before the full pass (each one waits for one bucket at most).
WAITING_PASSES = 2


@dataclass(frozen=True)
class LockRows:
    """``SELECT … FOR NO KEY UPDATE [NOWAIT]`` of the bucket-0 rows of ``product_ids`` (ascending, lock order step 8),
    then the lines of ``refuse`` whose locked row is short are refused (or, when the bucket count was raised since the
    quote read, the transaction runs again: locking the product's other rows here would break the lock order)."""

    product_ids: tuple[int, ...]
    nowait: bool
    refuse: tuple[ReserveLine, ...]


@dataclass(frozen=True)
class Reserve:
    """The reserve statement on bucket 0. When it takes nothing: a lost version check runs the transaction again
    (``restart_when_lost``); else bucket 0 is short, and the full pass runs when the product has other stock rows."""

    line: ReserveLine
    statement: Statement
    restart_when_lost: bool


@dataclass(frozen=True)
class Claim:
    """A bucketed product (K > 1): ``statements`` in turn, after one savepoint rolled back to after each miss, until
    one takes a bucket; else the full pass."""

    line: ReserveLine
    statements: tuple[Statement, ...]


Step = LockRows | Reserve | Claim


@dataclass(frozen=True)
class Plan:
    """The advisory keys to take first (lock order step 7, ascending), then the steps in order."""

    advisory_keys: tuple[int, ...]
    steps: tuple[Step, ...]


def plan_reservation(lines: Sequence[ReserveLine]) -> Plan:
    """The plan of reserving ``lines`` (one per product): pure, it reads nothing but its arguments."""
    lines = sorted(lines)
    advisory_keys = tuple(line.product_id for line in lines if strategy_of(line).advisory_key)
    if len(lines) > 1:
        lines = [line._replace(version=None) for line in lines]  # only a one-product order checks a version
        if all(line.bucket_count == 1 and line.stock_rows == 1 for line in lines):
            return Plan(advisory_keys, _rows_together(lines))
    return Plan(advisory_keys, tuple(step for line in lines for step in _one_product(line)))


def _rows_together(lines: list[ReserveLine]) -> tuple[Step, ...]:
    """Several products with one stock row each: every row locked first (``NOWAIT`` when one of their strategies
    says so), so that no two checkouts each hold a row the other needs and the conflict names every short product;
    then the guarded update of each."""
    nowait = any(strategy_of(line).nowait for line in lines)
    lock = LockRows(tuple(line.product_id for line in lines), nowait=nowait, refuse=tuple(lines))
    return (lock, *(_update(line) for line in lines))


def _one_product(line: ReserveLine) -> tuple[Step, ...]:
    """A product planned alone: a bucketed one by its claims; else its strategy's row lock (refusing a short row when
    the product has one stock row), then its update."""
    if line.bucket_count > 1:
        claims = (Statement.CLAIM_BUCKET, *[Statement.CLAIM_WAITING] * WAITING_PASSES)
        return (Claim(line, claims),)
    strategy = strategy_of(line)
    if not strategy.row_lock:
        return (_update(line),)
    lock = LockRows((line.product_id,), nowait=strategy.nowait, refuse=(line,) if line.stock_rows == 1 else ())
    return (lock, _update(line))


def _update(line: ReserveLine) -> Reserve:
    """The guarded update on bucket 0, at the version seen when the strategy checks one and the quote gave it."""
    at_version = strategy_of(line).checks_version and line.version is not None
    statement = Statement.RESERVE_AT_VERSION if at_version else Statement.RESERVE
    return Reserve(line, statement, restart_when_lost=at_version and line.stock_rows == 1)
