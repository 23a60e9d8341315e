"""The reservation's plan (``inventory.plan``), without a database: which rows, in which order, by which statement.

No test here is marked ``django_db`` or asks for ``db``: pytest-django refuses any database access in them, so the
planner is proven pure by running at all. What ``inventory.reserve`` then sends for each plan is held against the
database by the strategy, bucket and race tests (inventory/tests, payments/tests) and the docs' statement table.
"""

import ast
import sys
from pathlib import Path

import pytest

from inventory import plan, reserve
from inventory.models import InventoryStrategy
from inventory.plan import Claim, LockRows, Plan, Reserve, ReserveLine, Statement, plan_reservation
from inventory.strategies import STRATEGIES

R, AT_VERSION = Statement.RESERVE, Statement.RESERVE_AT_VERSION
CLAIMS = (Statement.CLAIM_BUCKET, Statement.CLAIM_WAITING, Statement.CLAIM_WAITING)


def line(product_id, qty=1, strategy="guarded_update", version=None, *, buckets=1, rows=None):
    return ReserveLine(product_id, qty, strategy, version, buckets, buckets if rows is None else rows)


@pytest.mark.parametrize(
    ("strategy", "steps"),
    [
        ("guarded_update", lambda ln: (Reserve(ln, R, restart_when_lost=False),)),
        ("serializable", lambda ln: (Reserve(ln, R, restart_when_lost=False),)),
        ("advisory", lambda ln: (Reserve(ln, R, restart_when_lost=False),)),
        ("optimistic", lambda ln: (Reserve(ln, AT_VERSION, restart_when_lost=True),)),
        ("row_lock", lambda ln: (LockRows((7,), False, (ln,)), Reserve(ln, R, restart_when_lost=False))),
        ("row_lock_nowait", lambda ln: (LockRows((7,), True, (ln,)), Reserve(ln, R, restart_when_lost=False))),
    ],
)
def test_a_one_product_order_is_its_strategys_steps(strategy, steps):
    one = line(7, 2, strategy, version=41)
    assert plan_reservation([one]) == Plan((7,) if strategy == "advisory" else (), steps(one))


def test_every_strategy_the_column_allows_is_data_the_planner_reads():
    assert set(STRATEGIES) == set(InventoryStrategy.values)


def test_an_optimistic_product_checks_a_version_only_when_the_quote_gave_one_and_restarts_only_with_one_row():
    unread = line(7, strategy="optimistic")
    assert plan_reservation([unread]).steps == (Reserve(unread, R, restart_when_lost=False),)
    rows_left = line(7, strategy="optimistic", version=41, rows=3)  # K lowered: rows left behind
    assert plan_reservation([rows_left]).steps == (Reserve(rows_left, AT_VERSION, restart_when_lost=False),)


def test_a_row_lock_product_with_rows_left_by_a_lowered_k_is_locked_but_not_refused_at_the_lock():
    rows_left = line(7, strategy="row_lock_nowait", rows=3)
    assert plan_reservation([rows_left]).steps == (LockRows((7,), True, ()), Reserve(rows_left, R, False))


def test_several_one_row_products_are_locked_together_first_ascending_whatever_their_strategies():
    lines = [line(9, 1, "optimistic", 5), line(3, 2, "row_lock_nowait"), line(5, 1, "advisory"), line(4, 1)]
    unversioned = sorted(ln._replace(version=None) for ln in lines)

    planned = plan_reservation(lines)

    assert planned.advisory_keys == (5,)
    assert planned.steps == (
        LockRows((3, 4, 5, 9), nowait=True, refuse=tuple(unversioned)),
        *(Reserve(ln, R, restart_when_lost=False) for ln in unversioned),  # no version: the rows are locked
    )


def test_several_one_row_products_without_a_nowait_one_wait_for_their_rows():
    planned = plan_reservation([line(2, strategy="row_lock"), line(1)])
    assert planned.steps[0] == LockRows((1, 2), nowait=False, refuse=(line(1), line(2, strategy="row_lock")))


def test_an_order_with_a_bucketed_product_is_planned_product_by_product_ascending():
    row_lock, bucketed, plain = line(1, strategy="row_lock", version=3), line(2, 4, buckets=4), line(3, rows=2)

    planned = plan_reservation([plain, bucketed, row_lock])

    unversioned = row_lock._replace(version=None)
    assert planned.steps == (
        LockRows((1,), False, (unversioned,)),
        Reserve(unversioned, R, restart_when_lost=False),
        Claim(bucketed, CLAIMS),
        Reserve(plain, R, restart_when_lost=False),
    )


def test_a_product_with_rows_left_by_a_lowered_k_keeps_an_order_product_by_product():
    left = line(3, rows=2)
    assert plan_reservation([line(1), left]).steps == (Reserve(line(1), R, False), Reserve(left, R, False))


def test_a_bucketed_product_claims_free_then_waits_then_takes_the_full_pass(monkeypatch):
    bucketed = line(7, 3, buckets=8)
    assert plan_reservation([bucketed]) == Plan((), (Claim(bucketed, CLAIMS),))
    monkeypatch.setattr(plan, "WAITING_PASSES", 0)
    assert plan_reservation([bucketed]).steps == (Claim(bucketed, (Statement.CLAIM_BUCKET,)),)


def test_advisory_keys_are_every_advisory_product_ascending_and_come_before_any_step():
    lines = [line(8, strategy="advisory"), line(2, buckets=4), line(5, strategy="advisory")]
    assert plan_reservation(lines).advisory_keys == (5, 8)


def test_an_unknown_strategy_is_an_error():
    with pytest.raises(ValueError, match="unknown inventory strategy"):
        plan_reservation([line(1, strategy="first_come")])


def test_every_planned_statement_is_a_constant_of_the_reserve_module():
    for statement in Statement:
        assert reserve._statement(statement) is getattr(reserve, statement.value)


def test_the_planner_imports_nothing_that_reaches_the_database():
    """Only the standard library and the strategies (data): no ORM, no connection."""
    tree = ast.parse(Path(plan.__file__).read_text())
    imported = {
        (node.module if isinstance(node, ast.ImportFrom) else alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    modules = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module.startswith("inv")
    }
    assert modules == {"inventory.strategies"}
    assert imported - {"inventory"} <= set(sys.stdlib_module_names), imported
