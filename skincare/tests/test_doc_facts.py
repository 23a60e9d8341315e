"""Claims of the docs that a reader acts on, held against the code they describe: the ledger's reasons, the waiting
room's place in the dependency map, the product API's fields, the memories a web process keeps, and the lock order of
a multi-product order."""

import ast
import importlib
import re
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from inventory.models import StockMovement
from skincare.tests.test_dependencies import ALLOWED
from skincare.tests.test_docs import APPS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def default(name: str) -> int:
    """The default of an integer setting, as config/settings.py writes it (the tests' environment may change the
    value itself)."""
    found = re.search(
        rf'^{name} = env_int\(\s*"{name}",\s*(\d+)\b', (ROOT / "config" / "settings.py").read_text(), re.M
    )
    assert found is not None, f"{name} has no literal default in config/settings.py"
    return int(found.group(1))


def test_the_ledger_table_names_every_reason_the_ledger_can_hold() -> None:
    text = (DOCS / "operations.md").read_text()
    table = text[text.index("| Reason ") : text.index("Summing a product's rows")]
    named = set(re.findall(r"^\| `([a-z_]+)`", table, re.M))
    assert named == set(StockMovement.Reason.values)


def test_the_waiting_rooms_place_in_the_layers_is_the_dependency_maps() -> None:
    text = (DOCS / "queue.md").read_text()
    assert "it imports only inventory and skincare, and payments" in text
    assert ALLOWED["waitingroom"] == frozenset({"inventory", "skincare"})
    assert "waitingroom" in ALLOWED["payments"]


def test_the_token_memory_outlasts_five_of_the_longest_polls() -> None:
    """queue.md: a process remembers a token more than five times the longest poll_after, both at their defaults."""
    text = " ".join((DOCS / "queue.md").read_text().split())
    stated = re.search(
        r"`API_TOKEN_CACHE_SECONDS` \((\d+) by default, more than five times the longest `poll_after`, "
        r"`QUEUE_POLL_MAX_SECONDS`, (\d+) by default",
        text,
    )
    assert stated is not None
    longest_poll = default("ADMISSION_TTL_SECONDS") // 2 - default("QUEUE_COUNTERS_MAX_AGE_SECONDS")
    longest_poll -= default("QUEUE_POLL_MIN_SECONDS")  # QUEUE_POLL_MAX_SECONDS's default, as the settings compute it
    assert (int(stated.group(1)), int(stated.group(2))) == (default("API_TOKEN_CACHE_SECONDS"), longest_poll)
    assert default("API_TOKEN_CACHE_SECONDS") > 5 * longest_poll


@pytest.mark.django_db
def test_the_public_product_api_does_not_show_the_strategy_or_the_buckets(client: Any, make_product: Any) -> None:
    assert "public product API does not show it" in (DOCS / "strategies.md").read_text()
    body = client.get(f"/v1/products/{make_product().pk}").json()
    assert "inventory_strategy" not in body and "stock_buckets" not in body


# What the application's functions change at module level that is no memory of the running shop: the domain errors'
# registry, filled as each class is defined (at import), never by a request.
NOT_MEMORIES = {"skincare.errors._DECLARED"}
# Calls that change a container in place.
MUTATORS = frozenset(
    {"add", "append", "appendleft", "clear", "discard", "pop", "popitem", "popleft", "remove", "setdefault", "update"}
)


def changed_at_module_level(source: str) -> set[str]:
    """The module-level names of ``source`` that one of its functions changes: rebinds (``global``), stores into
    (``x[k] = v``, ``x.a = v``, ``del x[k]``), changes in place (``x.clear()``, …), or calls a method of that changes
    the instance (an instance of a class of the module whose methods, besides ``__init__``, set ``self``'s
    attributes)."""
    tree = ast.parse(source)
    top: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            top.update({target.id: node.value for target in node.targets if isinstance(target, ast.Name)})
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            top[node.target.id] = node.value
        elif isinstance(node, ast.ClassDef):
            top[node.name] = node

    def sets_self(function: ast.AST) -> bool:
        for node in ast.walk(function):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AugAssign)
                else []
            )
            if any(
                isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self" for t in targets
            ):
                return True
        return False

    stateful = {
        node.name
        for node in tree.body
        if isinstance(node, ast.ClassDef)
        and any(isinstance(f, ast.FunctionDef) and f.name != "__init__" and sets_self(f) for f in node.body)
    }
    changed: set[str] = set()
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        declared_global = {name for node in ast.walk(function) if isinstance(node, ast.Global) for name in node.names}
        for inner in ast.walk(function):
            targets: list[ast.expr] = []
            if isinstance(inner, ast.Assign | ast.Delete):
                targets = inner.targets
            elif isinstance(inner, ast.AugAssign | ast.AnnAssign):
                targets = [inner.target]
            for target in targets:
                changed |= {
                    sub.id
                    for sub in ast.walk(target)
                    if isinstance(sub, ast.Name)
                    and sub.id in declared_global
                    and isinstance(sub.ctx, ast.Store | ast.Del)
                }
                if isinstance(target, ast.Subscript | ast.Attribute) and isinstance(target.value, ast.Name):
                    changed.add(target.value.id)
            if (
                isinstance(inner, ast.Call)
                and isinstance(inner.func, ast.Attribute)
                and isinstance(inner.func.value, ast.Name)
            ):
                name, made = inner.func.value.id, top.get(inner.func.value.id)
                if inner.func.attr in MUTATORS or (
                    isinstance(made, ast.Call) and isinstance(made.func, ast.Name) and made.func.id in stateful
                ):
                    changed.add(name)
    return {name for name in changed if name in top}


def application_memories() -> set[str]:
    """``module.name`` of every module-level name the application's functions change (tests, test helpers and
    migrations left out)."""
    found: set[str] = set()
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if "tests" in parts or "migrations" in parts or parts[-1] == "testing":
                continue
            module = ".".join(parts).removesuffix(".__init__")
            found |= {f"{module}.{name}" for name in changed_at_module_level(path.read_text())}
    return found


def memories_table(text: str) -> list[list[str]]:
    """The rows (cells) of the table under "What each process remembers"."""
    section = text[text.index("### What each process remembers") :]
    section = section[: section.index("\n#", 1)]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| memory |")]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows]


def documented_memories(text: str) -> set[str]:
    return {name for row in memories_table(text) for name in re.findall(r"`([\w.]+)`", row[1])}


def memory_problems(documented: set[str], found: set[str]) -> list[str]:
    problems = []
    for name in sorted(documented):
        module, _, attribute = name.rpartition(".")
        try:
            exists = hasattr(importlib.import_module(module), attribute)
        except ModuleNotFoundError:
            exists = False
        if not exists:
            problems.append(f"{name}: documented, but there is no such name")
        elif name not in found:
            problems.append(f"{name}: documented, but no function of {module} changes it")
    problems += [f"{name}: a per-process memory the docs do not list" for name in sorted(found - documented)]
    return problems


def test_the_memories_each_process_keeps_are_exactly_the_module_level_state_the_code_changes() -> None:
    """operations.md lists every per-process memory by its module-level name: a documented one that does not exist
    (or that nothing changes) fails, and so does module-level state a function changes that the table leaves out."""
    found = application_memories()
    assert found >= NOT_MEMORIES, "an exception that no longer names a changed module-level name"
    assert memory_problems(documented_memories((DOCS / "operations.md").read_text()), found - NOT_MEMORIES) == []


def test_control_the_memory_guard_refuses_a_missing_and_an_invented_memory() -> None:
    text = (DOCS / "operations.md").read_text()
    found = application_memories() - NOT_MEMORIES
    documented = documented_memories(text)
    assert "inventory.soldout._short: a per-process memory the docs do not list" in memory_problems(
        documented - {"inventory.soldout._short"}, found
    )
    assert "inventory.soldout._gone: documented, but there is no such name" in memory_problems(
        documented | {"inventory.soldout._gone"}, found
    )
    assert "inventory.soldout.MAX_ENTRIES: documented, but no function of inventory.soldout changes it" in (
        memory_problems(documented | {"inventory.soldout.MAX_ENTRIES"}, found)
    )
    source = "x = {}\ny = Gate()\nclass Gate:\n    def open(self):\n        self.on = True\ndef f():\n    y.open()\n"
    assert changed_at_module_level(source) == {"y"}
    assert changed_at_module_level(source + "def g():\n    x.setdefault(1, 2)\n") == {"x", "y"}


def test_every_bound_of_a_memory_is_a_setting() -> None:
    """The table's "bounded by" column names settings by their variable; each exists with the default stated."""
    rows = memories_table((DOCS / "operations.md").read_text())
    bounds = {name: row[3] for row in rows for name in re.findall(r"`([A-Z][A-Z_]+)`", row[3])}
    assert {"SOLD_OUT_CACHE_MS", "API_TOKEN_CACHE_SECONDS", "QUEUE_COUNTERS_MAX_AGE_SECONDS"} <= set(bounds)
    for name, cell in bounds.items():
        assert hasattr(settings, name), name
        stated = re.search(rf"`{name}` \((\d+)", cell)
        if stated:
            assert int(stated.group(1)) == default(name), (name, cell)


def test_the_lock_order_of_a_multi_product_order_depends_on_its_stock_rows():
    """locking.md and strategies.md say what stock_reserve does (by its plan, ``inventory.plan``): one-row products
    locked together first, an order with a bucketed product product by product."""
    from inventory.plan import LockRows, ReserveLine, plan_reservation

    one_row = plan_reservation([ReserveLine(2, 1, "row_lock"), ReserveLine(1, 1, "guarded_update")]).steps
    assert isinstance(one_row[0], LockRows) and one_row[0].product_ids == (1, 2)
    assert not any(isinstance(step, LockRows) for step in one_row[1:])  # before any update
    mixed = [ReserveLine(3, 1, "row_lock"), ReserveLine(2, 1, bucket_count=4, stock_rows=4), ReserveLine(1, 1)]
    steps = plan_reservation(mixed).steps
    assert [step.line.product_id for step in steps if not isinstance(step, LockRows)] == [1, 2, 3]
    assert [step.product_ids for step in steps if isinstance(step, LockRows)] == [(3,)]  # its own, right before
    assert isinstance(steps[-2], LockRows)
    locking = (DOCS / "locking.md").read_text()
    assert "whose products each have one stock row locks those rows in one ascending" in locking
    assert "an order with a bucketed product\ntakes its products one by one" in locking
    assert "An order with a bucketed product takes step 1" in (DOCS / "strategies.md").read_text()


def test_the_benchmarks_time_the_default_strategy_only() -> None:
    """docs/strategies.md#measured: no benchmark names a strategy, so make bench's products keep the column's
    default, guarded_update."""
    from inventory.models import InventoryStrategy, Product

    field = Product._meta.get_field("inventory_strategy")
    assert field.default == field.db_default.value == InventoryStrategy.GUARDED_UPDATE
    naming = [
        str(path.relative_to(ROOT))
        for path in [
            *(ROOT / "bench").glob("*.py"),
            ROOT / "devtools" / "djangoctl.py",  # the bench's products and customers
            ROOT / "skincare" / "demo.py",  # the demo data flash_sale_setup starts from
            ROOT / "backoffice" / "management" / "commands" / "flash_sale_setup.py",  # the hot product
        ]
        if re.search(r"inventory_strategy|\bstrategy=", path.read_text())
    ]
    assert naming == [], f"a benchmark names a strategy: {naming}; docs/strategies.md#measured says none does"
