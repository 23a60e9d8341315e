"""The dependency guard: each app imports only the apps :data:`ALLOWED` lists for it, a DAG with the foundation
(``skincare``) at the bottom and the back office (``backoffice``) at the top; ``config`` (project wiring) may import
every app, and nothing imports ``backoffice`` or ``config``. The application never imports the tooling (``bench``,
``devtools``). An import inside a function never reaches another app, not even a lower one: it hides a dependency
from the reader of the module's head, and breaks no cycle a layered DAG has.

Application code is every module of these packages except their tests (``tests/``) and test helpers
(``testing.py``): a test may drive the whole stack to set up its data. ``importlib.import_module("...")`` with a
literal name counts as an import where it is called. The import-cycle test of the foundation is separate
(it also counts imports inside one app).
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Floors, bottom to top, as an explicit map: what each app may import (written out in full, not derived).
ALLOWED: dict[str, frozenset[str]] = {
    "skincare": frozenset(),
    "inventory": frozenset({"skincare"}),
    "orders": frozenset({"inventory", "skincare"}),
    "carts": frozenset({"orders", "inventory", "skincare"}),
    "waitingroom": frozenset({"inventory", "skincare"}),
    "payments": frozenset({"waitingroom", "orders", "inventory", "skincare"}),
    "checkout": frozenset({"carts", "payments", "waitingroom", "orders", "inventory", "skincare"}),
    "backoffice": frozenset({"checkout", "carts", "payments", "waitingroom", "orders", "inventory", "skincare"}),
    "config": frozenset(
        {"backoffice", "checkout", "carts", "payments", "waitingroom", "orders", "inventory", "skincare"}
    ),
}

TOOLING = frozenset({"bench", "devtools"})


def imports(source: str) -> list[tuple[int, str, bool]]:
    """(line, dotted module, inside a function) of every import in ``source``."""
    found: list[tuple[int, str, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name, in_function) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module, in_function))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value, in_function))
        inside = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(ast.parse(source), False)
    return found


def forbidden_imports(app: str, source: str) -> list[str]:
    """The imports of a module of ``app`` that the map does not allow (another app not in ``ALLOWED[app]``, or the
    tooling)."""
    problems = []
    for line, module, _in_function in imports(source):
        target = module.split(".")[0]
        if target in TOOLING:
            problems.append(f"line {line}: imports the tooling ({module})")
        elif target in ALLOWED and target != app and target not in ALLOWED[app]:
            problems.append(f"line {line}: imports {module} ({app} may import {sorted(ALLOWED[app]) or 'no app'})")
    return problems


def local_cross_app_imports(app: str, source: str) -> list[str]:
    """Imports inside a function of a module of ``app`` that reach another app (allowed or not)."""
    return [
        f"line {line}: imports {module} inside a function"
        for line, module, in_function in imports(source)
        if in_function and module.split(".")[0] in ALLOWED and module.split(".")[0] != app
    ]


def application_modules():
    for app in ALLOWED:
        for path in sorted((ROOT / app).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if "tests" in relative.parts or path.name == "testing.py":
                continue
            yield app, relative


def violations(check) -> list[str]:
    return [
        f"{path}: {problem}" for app, path in application_modules() for problem in check(app, (ROOT / path).read_text())
    ]


def test_every_import_follows_the_map():
    found = [v for v in violations(forbidden_imports) if "the tooling" not in v]
    assert not found, "imports the allowed-imports map does not allow:\n" + "\n".join(found)


def test_the_application_never_imports_the_tooling():
    found = [v for v in violations(forbidden_imports) if "the tooling" in v]
    assert not found, "application code that imports bench or devtools:\n" + "\n".join(found)


def test_no_import_inside_a_function_crosses_apps():
    found = violations(local_cross_app_imports)
    assert not found, "imports inside functions that reach another app (move them to the module's head):\n" + (
        "\n".join(found)
    )


# HTTP lives in the apps' API modules: the views (``api.py``), their OpenAPI descriptions (``schemas.py``), routes and the
# foundation's pipeline. Domain modules (models, services, selectors, the reservation, errors' classes) import
# nothing from DRF; the few foundation modules that do are named here with the reason.
HTTP_MODULE_NAMES = frozenset({"api.py", "schemas.py", "urls.py"})
HTTP_MODULES = {
    "skincare/apiview.py": "the one view class and its request path",
    "skincare/openapi.py": "the OpenAPI document's shared parts",
    "skincare/errors.py": "DRF's own exceptions mapped to the error codes, for the one handler",
    "skincare/migrations/0003_hash_legacy_drf_tokens.py": "reads DRF's token table once",
}
FRAMEWORK = ("rest_framework", "drf_spectacular")


def framework_imports(path: Path, source: str) -> list[str]:
    """The DRF imports of a module that is not an HTTP module."""
    relative = str(path)
    if path.name in HTTP_MODULE_NAMES or relative in HTTP_MODULES:
        return []
    return [
        f"{relative}: line {line}: imports {module}"
        for line, module, _in_function in imports(source)
        if module.split(".")[0] in FRAMEWORK
    ]


def test_only_the_api_modules_import_the_framework():
    found = [
        problem
        for _app, path in application_modules()
        for problem in framework_imports(path, (ROOT / path).read_text())
    ]
    assert not found, "domain modules that import DRF (HTTP belongs in api.py/schemas.py):\n" + "\n".join(found)
    for relative in HTTP_MODULES:
        assert (ROOT / relative).exists(), f"{relative} is named as an HTTP module but does not exist"


@pytest.mark.parametrize(
    ("path", "source"),
    [
        ("checkout/services.py", "from rest_framework.request import Request\n"),
        ("orders/selectors.py", "import rest_framework\n"),
        ("inventory/plan.py", "def f():\n    from drf_spectacular.utils import extend_schema\n"),
    ],
)
def test_control_the_framework_guard_catches_a_domain_module_importing_drf(path, source):
    assert framework_imports(Path(path), source)


def test_the_map_is_a_dag_with_the_foundation_at_the_bottom_and_the_wiring_on_top():
    assert cycle(ALLOWED) is None
    assert ALLOWED["skincare"] == frozenset()
    for app, allowed in ALLOWED.items():
        assert "config" not in allowed, f"{app} may import config"
        if app != "config":
            assert "backoffice" not in allowed, f"{app} may import the back office"
    assert ALLOWED["config"] == frozenset(ALLOWED) - {"config"}
    assert ALLOWED["backoffice"] == frozenset(ALLOWED) - {"config", "backoffice"}


def test_the_guard_sees_every_app_module():
    seen = {str(path) for _app, path in application_modules()}
    for expected in (
        "skincare/api.py",
        "inventory/services.py",
        "orders/services.py",
        "payments/services.py",
        "carts/services.py",
        "waitingroom/admission.py",
        "backoffice/saleboard.py",
        "backoffice/management/commands/expire_reservations.py",
    ):
        assert expected in seen
    assert {app for app, _path in application_modules()} >= set(ALLOWED) - {"config"}


def cycle(graph: dict[str, frozenset[str]]) -> list[str] | None:
    """A cycle of ``graph`` (app -> apps it may import) as a path, or None when it is a DAG."""
    done: set[str] = set()

    def walk(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        for target in sorted(graph.get(node, ())):
            found = walk(target, [*path, node])
            if found:
                return found
        done.add(node)
        return None

    for start in graph:
        found = walk(start, [])
        if found:
            return found
    return None


# --- Controls: each rule fed a violation ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("app", "source"),
    [
        ("inventory", "from orders.models import Order\n"),
        ("inventory", "import payments.services\n"),
        ("skincare", "from inventory.exceptions import StockConflict\n"),
        ("orders", "import importlib\nimportlib.import_module('payments.sandbox')\n"),
        ("payments", "from carts.models import Cart\n"),
        ("orders", "from waitingroom import services\n"),
        ("waitingroom", "from orders.models import Order\n"),
        ("waitingroom", "from checkout.services import checkout\n"),
        ("carts", "from backoffice import saleboard\n"),
        ("backoffice", "from config import settings\n"),
        ("skincare", "import config.urls\n"),
    ],
    ids=[
        "inventory->orders",
        "inventory->payments",
        "skincare->inventory",
        "dyn",
        "payments->carts",
        "orders->waitingroom",
        "waitingroom->orders (side by side)",
        "waitingroom->payments",
        "carts->backoffice",
        "backoffice->config",
        "skincare->config",
    ],
)
def test_control_the_guard_catches_an_import_the_map_forbids(app, source):
    assert forbidden_imports(app, source), f"the guard missed a forbidden import in {app}: {source!r}"


@pytest.mark.parametrize("source", ["from devtools import devdb\n", "def f():\n    import bench.cpu\n"])
def test_control_the_guard_catches_an_import_of_the_tooling(source):
    assert any("the tooling" in problem for problem in forbidden_imports("config", source))


@pytest.mark.parametrize(
    ("app", "source"),
    [
        ("payments", "def f():\n    from orders import services\n"),
        ("backoffice", "class C:\n    def m(self):\n        import waitingroom.selectors\n"),
        ("orders", "async def f():\n    from payments import services\n"),
        ("carts", "def f():\n    import importlib\n    return importlib.import_module('inventory.models')\n"),
        ("config", "handler = lambda: __import__('x') or importlib.import_module('skincare.api')\n"),
    ],
    ids=["downward", "method", "async upward", "dynamic", "lambda"],
)
def test_control_the_guard_catches_an_import_inside_a_function_that_crosses_apps(app, source):
    assert local_cross_app_imports(app, source), f"the guard missed a local cross-app import: {source!r}"


def test_control_the_guard_catches_a_cycle_in_the_map():
    assert cycle({**ALLOWED, "skincare": frozenset({"backoffice"})}) is not None
    assert cycle({"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"})}) == ["a", "b", "c", "a"]


@pytest.mark.parametrize(
    ("app", "source"),
    [
        ("payments", "from orders.models import Order\nfrom inventory import services\nfrom skincare import db\n"),
        ("payments", "from waitingroom.admission import admission_use\n"),
        ("inventory", "from skincare.errors import DomainError\nfrom django.db import models\n"),
        ("backoffice", "from carts.services import carts_prune\nfrom waitingroom.metrics import QueueCollector\n"),
        ("config", "from backoffice import urls\n"),
        ("orders", "def f():\n    from orders import selectors\n    import json\n"),
    ],
)
def test_imports_the_map_allows_pass(app, source):
    assert forbidden_imports(app, source) == []
    assert local_cross_app_imports(app, source) == []
