"""No import cycle among the application's modules, counting imports inside functions.

An import inside a function hides a cycle from Python (it runs after both modules are loaded) but not from a
reader: two modules that need each other are one module split in two, or a fact in the wrong one. The graph is
built from the source (``ast``): every ``import``/``from … import`` anywhere in a module, function bodies included,
and ``importlib.import_module("…")`` with a literal name. Application modules are every module of the project's
packages (each app and ``config``) except tests (``tests/``) and test helpers (``testing.py``); tooling
(``bench``, ``devtools``) is not application code.
"""

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOLING = {"bench", "devtools"}


def packages() -> list[str]:
    """The project's application packages: each app (a directory with ``apps.py``) and ``config``."""
    found = {path.parent.name for path in ROOT.glob("*/apps.py")}
    if (ROOT / "config" / "__init__.py").exists():
        found.add("config")
    return sorted(found - TOOLING)


def module_name(relative: Path) -> str:
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def application_modules() -> dict[str, str]:
    """Dotted name -> source of every application module."""
    modules = {}
    for package in packages():
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if "tests" in relative.parts or path.name == "testing.py":
                continue
            modules[module_name(relative)] = path.read_text()
    return modules


def _type_checking_only(tree: ast.Module) -> set[ast.AST]:
    """The statements under ``if TYPE_CHECKING:``: names for annotations, never imported when the code runs."""
    skipped: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for statement in node.body:
                skipped.update(ast.walk(statement))
    return skipped


def imported_names(module: str, source: str, *, is_package: bool = False) -> set[str]:
    """Every dotted name ``module`` imports, wherever the import statement is (``from a import b`` gives both ``a``
    and ``a.b``: ``b`` may be a module). Imports under ``if TYPE_CHECKING:`` do not run and do not count."""
    names = set()
    tree = ast.parse(source)
    skipped = _type_checking_only(tree)
    for node in ast.walk(tree):
        if node in skipped:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.add(node.args[0].value)
    return names


def import_graph(modules: Mapping[str, str], packages_: Iterable[str] = ()) -> dict[str, set[str]]:
    """Module -> the application modules it imports. ``from a import b`` with ``b`` a module is an edge to ``a.b``
    only (the package ``a`` is where Python finds it, not what the module needs); an empty ``__init__`` is no edge."""
    package_names = set(packages_)
    graph = {}
    for module, source in modules.items():
        names = imported_names(module, source, is_package=module in package_names)
        graph[module] = {
            name
            for name in names
            if name in modules
            and name != module
            and modules[name].strip()
            and not any(other.startswith(name + ".") and other in modules for other in names)
        }
    return graph


def find_cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start)
            if cycle:
                return cycle
    return None


def floors(graph: Mapping[str, set[str]]) -> dict[str, int]:
    """Each module's floor in an acyclic graph: 0 imports nothing of the graph, n imports at most floor n-1."""
    floor: dict[str, int] = {}

    def height(node: str) -> int:
        if node not in floor:
            floor[node] = 1 + max((height(t) for t in graph.get(node, ())), default=-1)
        return floor[node]

    for node in graph:
        height(node)
    return floor


def test_no_import_cycle_among_application_modules():
    modules = application_modules()
    graph = import_graph(modules, packages())
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle (imports inside functions count): " + " -> ".join(cycle or [])


def forbidden_imports(modules: Mapping[str, str]) -> list[str]:
    """``config`` (settings, URLs, WSGI) may import every app and nothing imports it; no application module, the
    wiring included, imports development tooling (``devtools``, ``bench``): the production image has neither."""
    found = []
    for module, source in modules.items():
        for name in sorted(imported_names(module, source)):
            top = name.split(".")[0]
            if top in TOOLING or (top == "config" and module.split(".")[0] != "config"):
                found.append(f"{module} imports {name}")
    return found


def test_nothing_imports_the_wiring_and_nothing_imports_tooling():
    assert not forbidden_imports(application_modules())


def test_control_an_app_importing_the_settings_or_the_settings_importing_tooling_are_found():
    modules = {
        "config.settings": "def url():\n    from devtools import devdb\n",
        "config.urls": "from config import modes\n",
        "orders.api": "from config.settings import DEBUG\n",
    }
    assert forbidden_imports(modules) == [
        "config.settings imports devtools",
        "config.settings imports devtools.devdb",
        "orders.api imports config.settings",
        "orders.api imports config.settings.DEBUG",
    ]


def test_the_graph_sees_every_app_and_imports_inside_functions():
    modules = application_modules()
    assert {"skincare.api", "skincare.db", "inventory.services", "orders.services", "payments.services"} <= set(modules)
    assert not any(".tests" in name or name.endswith(".testing") for name in modules)
    graph = import_graph({"app.a": "def f():\n    from app import b\n", "app.b": "import app.c\n", "app.c": "X = 1\n"})
    assert graph == {"app.a": {"app.b"}, "app.b": {"app.c"}, "app.c": set()}


def test_control_a_cycle_through_a_function_local_import_is_found():
    modules = {
        "app.api": "from app.db import run\n",
        "app.db": "from app import metrics\n",
        "app.metrics": "def labels():\n    from app.api import CODES\n    return CODES\n",
        "app.errors": "CODES = ()\n",
    }
    assert find_cycle(import_graph(modules)) == ["app.api", "app.db", "app.metrics", "app.api"]
    modules["app.metrics"] = "from app.errors import CODES\n"
    assert find_cycle(import_graph(modules)) is None


def test_control_relative_imports_resolve():
    modules = {"app.a": "from . import b\n", "app.b": "from .a import X\n"}
    assert find_cycle(import_graph(modules)) == ["app.a", "app.b", "app.a"]


def test_floors_count_the_longest_chain_down():
    graph = {"a": {"b", "c"}, "b": {"c"}, "c": set()}
    assert floors(graph) == {"a": 2, "b": 1, "c": 0}
