"""The dependency guard: apps import downwards only, carts → payments → waitingroom → orders → inventory → skincare.

Application code is every module of the six packages except their tests (``tests/``) and test helpers
(``testing.py``): a test may drive the whole stack to set up its data. Imports inside functions count too,
and so do ``importlib.import_module("...")`` calls with a literal name.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = {"skincare": 0, "inventory": 1, "orders": 2, "waitingroom": 3, "payments": 4, "carts": 5}


def imported_modules(source: str) -> list[tuple[int, str]]:
    """(line, dotted module) of every import in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value))
    return found


def upward_imports(app: str, source: str) -> list[str]:
    """Imports in a module of ``app`` that reach a higher layer."""
    return [
        f"line {line}: imports {module}"
        for line, module in imported_modules(source)
        if LAYERS.get(module.split(".")[0], -1) > LAYERS[app]
    ]


def application_modules():
    for app in LAYERS:
        for path in sorted((ROOT / app).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if "tests" in relative.parts or path.name == "testing.py":
                continue
            yield app, relative


def test_no_layer_imports_a_higher_one():
    violations = [
        f"{path}: {problem}"
        for app, path in application_modules()
        for problem in upward_imports(app, (ROOT / path).read_text())
    ]
    assert not violations, "imports against carts → payments → waitingroom → orders → inventory → skincare:\n" + (
        "\n".join(violations)
    )


def test_the_guard_sees_every_app_module():
    seen = {str(path) for _app, path in application_modules()}
    for expected in (
        "skincare/api.py",
        "inventory/services.py",
        "orders/services.py",
        "payments/services.py",
        "carts/services.py",
        "waitingroom/admission.py",
    ):
        assert expected in seen


@pytest.mark.parametrize(
    ("app", "source"),
    [
        ("inventory", "from orders.models import Order\n"),
        ("inventory", "import payments.services\n"),
        ("orders", "def f():\n    from payments import services\n"),
        ("skincare", "from inventory.exceptions import StockConflict\n"),
        ("orders", "import importlib\nimportlib.import_module('payments.sandbox')\n"),
        ("payments", "from carts.models import Cart\n"),
        ("orders", "from waitingroom import services\n"),
        ("waitingroom", "from payments.checkout import checkout\n"),
    ],
    ids=[
        "inventory->orders",
        "inventory->payments",
        "orders->payments (local import)",
        "skincare->inventory",
        "dyn",
        "payments->carts",
        "orders->waitingroom",
        "waitingroom->payments",
    ],
)
def test_control_the_guard_catches_an_upward_import(app, source):
    assert upward_imports(app, source), f"the guard missed an upward import in {app}: {source!r}"


@pytest.mark.parametrize(
    ("app", "source"),
    [
        ("payments", "from orders.models import Order\nfrom inventory import services\nfrom skincare import db\n"),
        ("inventory", "from skincare.errors import DomainError\nfrom django.db import models\n"),
    ],
)
def test_downward_imports_are_allowed(app, source):
    assert upward_imports(app, source) == []
