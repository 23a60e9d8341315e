"""The docs guard: what README.md and docs/**/*.md name must exist, so a rename or a removal fails the suite
instead of leaving a doc that sends the reader nowhere.

- every repository path they name (in backticks or as a Markdown link) is in the git tree, or is an artifact that
  ``.gitignore`` declares (``.env``, ``.data/pg``: written by ``make``); a glob matches at least one file; a pytest
  node id (``path::test_name``) names a test function of that file;
- every ``module.symbol`` of the project's packages they name in backticks imports and has that attribute (Django
  system-check ids such as ``payments.E001`` must be defined by a check of that app);
- every ``make <target>`` (in backticks or in a shell block) is a target of the Makefile, and every
  ``python -m <module>`` imports;
- every ``docs/….md#heading`` that a file other than a doc names (a comment, a docstring, an error message, a check's
  hint, an alert's runbook link) is a doc with that heading;
- README.md stays within 250 lines, a runbook (docs/runbooks/) within 300, every other doc within 400, and each
  section of a runbook says what the operator sees, does and checks, in that order.

The README's error table and docs/configuration.md's tables are generated from the code; their guard is
``skincare/tests/test_generated_docs.py``.

No allow-list: a name that is not the project's (a URL path, a SQL fragment, a setting) does not match the patterns
below. Each rule has a control test that feeds it a wrong doc.
"""

import fnmatch
import importlib
import importlib.util
import os
import re
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
from django.apps import apps

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# The project's own packages: every installed app that lives in this repository, and the tools.
APPS = sorted({config.name.split(".")[0] for config in apps.get_app_configs() if (ROOT / config.name).is_dir()})
PACKAGES = (*APPS, "bench", "devtools")

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
LINK = re.compile(r"\]\(([^)\s]+)\)")
# A repository path: a relative path with a directory (``checkout/services.py``, ``docs/img/``), or a file name with
# a known extension (``idempotency.py``). URL paths start with a slash and are not paths of the repository, nor is a
# rate (``20/minute``).
PATH = re.compile(
    r"^(?:[A-Za-z_.][\w.*…-]*/)(?:[\w.*…-]+/)*[\w.*…-]*(?:::[\w*…\[\]-]+)?$|^[\w*…-]+\.(?:py|md|toml|txt|ya?ml|cfg|ini|sh|conf|json|png|svg)"
    r"(?:::[\w*…\[\]-]+)?$"
)
DOTTED = re.compile(rf"(?<![\w/.-])((?:{'|'.join(PACKAGES)})(?:\.\w+)+)(?![\w/-])")
QUOTED = re.compile(rf"[\"']((?:{'|'.join(PACKAGES)})(?:\.\w+)+)[\"']")
MAKE = re.compile(r"(?<![\w-])make ([a-z][\w-]*)(?![\w=-])")
PYTHON_M = re.compile(r"python3? -m ([\w.]+)")


def doc_name(doc: Path) -> str:
    return str(doc.relative_to(ROOT))


def inline_code(text: str) -> Iterator[str]:
    """The inline code spans of a Markdown text, fenced blocks left out."""
    for match in INLINE.finditer(FENCE.sub("", text)):
        yield match.group(1).strip()


def fenced_code(text: str) -> Iterator[str]:
    for match in FENCE.finditer(text):
        yield match.group(1)


@cache
def tracked_files() -> tuple[str, ...]:
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],  # noqa: S607 - the git of PATH, on this checkout
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    return tuple(out.stdout.split())


def ignored_by_git(path: str) -> bool:
    """An artifact that .gitignore declares (written by ``make``, not shipped), or a file in such a directory."""
    parts = path.split("/")
    prefixes = [p for n in range(1, len(parts)) for p in ("/".join(parts[:n]), "/".join(parts[:n]) + "/")] + [path]
    check = ["git", "check-ignore", "-q", "--no-index"]
    return any(subprocess.run([*check, p], cwd=ROOT, capture_output=True).returncode == 0 for p in prefixes)  # noqa: S603


def path_problem(token: str, *, linked_from: Path | None) -> str | None:
    """Why ``token`` names nothing: a Markdown link of the doc ``linked_from`` (relative to its directory; a
    ``#heading`` must be one of the target's headings), or a path in backticks (``linked_from`` None), relative to
    the repository root, where a bare file name may be anywhere."""
    token, _, anchor = token.partition("#")
    path, _, node = token.partition("::")
    pattern = path.replace("…", "*").rstrip("/")
    directory = path.endswith("/")
    if linked_from is not None:
        pattern = os.path.relpath(os.path.normpath(linked_from.parent / pattern), ROOT)
    files = tracked_files()
    if "/" in pattern:
        matches = [f for f in files if fnmatch.fnmatch(f, pattern) or f.startswith(pattern + "/")]
    else:
        matches = [f for f in files if fnmatch.fnmatch(Path(f).name, pattern) or f.startswith(pattern + "/")]
    if not matches:
        if "*" not in pattern and ignored_by_git(pattern + "/" * directory):
            return None
        return "no such file"
    if node:
        name = fnmatch.translate(node.replace("…", "*").split("[")[0]).removeprefix("(?s:").removesuffix(")\\Z")
        defined = re.compile(rf"^(?:\s*(?:async )?def {name}\(|class {name}\b|{name}(?:: [^=]+)? =)", re.M)
        if not any(defined.search((ROOT / f).read_text()) for f in matches if f.endswith(".py")):
            return f"no {node} in {', '.join(sorted(matches))}"
    if anchor and pattern.endswith(".md"):
        return anchor_problem(anchor, text=(ROOT / pattern).read_text(), name=pattern)
    return None


def anchor_problem(anchor: str, *, text: str, name: str) -> str | None:
    """Why ``#anchor`` names no heading of the Markdown ``text`` of the doc ``name`` (GitHub's slugs)."""
    headings = re.findall(r"^#+ (.+?)\s*$", FENCE.sub("", text), re.M)
    slugs = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}
    return None if anchor in slugs else f"no heading #{anchor} in {name}"


def symbol_problem(dotted: str) -> str | None:
    """Why ``dotted`` names nothing. It is a module and attributes (imported, then looked up), a migration
    (``skincare.0003``), a permission (``inventory.adjust_stock``, ``inventory.change_product``), or a name that the
    code spells as a string (a logger, a system-check id, a signing salt)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        if importlib.util.find_spec(parts[0]) is None:
            return "no such package"
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and name.startswith(exc.name):
                continue
            raise
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                break
            obj = getattr(obj, attr)
        else:
            return None
        break
    app, _, rest = dotted.partition(".")
    if re.fullmatch(r"\d{4}", rest) and any(f.startswith(f"{app}/migrations/{rest}_") for f in tracked_files()):
        return None
    if rest in permissions().get(app, set()):
        return None
    if dotted in source_strings():
        return None
    return f"{name} has no {'.'.join(parts[cut:])}" if cut > 1 or parts[1:] else "no such module"


@cache
def permissions() -> dict[str, set[str]]:
    """app label -> the codenames of its models' permissions (Django's four and each model's own)."""
    from django.apps import apps

    found: dict[str, set[str]] = {}
    for model in apps.get_models():
        meta = model._meta
        codenames = {f"{action}_{meta.model_name}" for action in meta.default_permissions}
        codenames |= {codename for codename, _ in meta.permissions}
        found.setdefault(meta.app_label, set()).update(codenames)
    return found


@cache
def source_strings() -> frozenset[str]:
    """Every dotted string literal of the project's own code (tests left out)."""
    found: set[str] = set()
    for f in tracked_files():
        if f.endswith(".py") and f.split("/")[0] in PACKAGES and "/tests/" not in f:
            found.update(QUOTED.findall((ROOT / f).read_text()))
    return frozenset(found)


@cache
def make_targets() -> frozenset[str]:
    text = (ROOT / "Makefile").read_text()
    return frozenset(re.findall(r"^([a-z][\w-]*):(?!=)", text, re.M))


def named_paths(text: str) -> Iterator[tuple[bool, str]]:
    """(is a Markdown link, the path) for every path a doc names."""
    for code in inline_code(text):
        if PATH.match(code) and "<" not in code:
            yield False, code
    for target in LINK.findall(FENCE.sub("", text)):
        if not re.match(r"^[a-z]+:", target):
            yield True, target


def named_symbols(text: str) -> Iterator[str]:
    for code in inline_code(text):
        if "/" in code and " " not in code:
            continue  # a path (``config/gunicorn.conf.py``), checked as one
        for match in DOTTED.finditer(code):
            yield match.group(1).removesuffix(".py")


def named_commands(text: str) -> Iterator[tuple[str, str]]:
    for code in [*inline_code(text), *fenced_code(text)]:
        for target in MAKE.findall(code):
            yield "make", target
        for module in PYTHON_M.findall(code):
            yield "python -m", module


def problems(text: str, *, name: str) -> list[str]:
    """What the doc ``name`` (a path from the repository root), whose text is ``text``, names that does not exist."""
    found: list[str] = []
    for link, token in dict.fromkeys(named_paths(text)):
        if link and token.startswith("#"):  # a heading of this doc
            why = anchor_problem(token[1:], text=text, name=name)
        else:
            why = path_problem(token, linked_from=ROOT / name if link else None)
        if why:
            found.append(f"{name}: path `{token}`: {why}")
    for dotted in dict.fromkeys(named_symbols(text)):
        why = symbol_problem(dotted)
        if why:
            found.append(f"{name}: symbol `{dotted}`: {why}")
    for kind, command in dict.fromkeys(named_commands(text)):
        if kind == "make" and command not in make_targets():
            found.append(f"{name}: `make {command}`: no such Makefile target")
        if kind == "python -m" and symbol_problem(command) is not None:
            found.append(f"{name}: `python -m {command}`: no such module")
    return found


def test_every_path_symbol_and_make_target_the_docs_name_exists() -> None:
    found = [problem for doc in DOCS for problem in problems(doc.read_text(), name=doc_name(doc))]
    assert not found, "\n".join(found)


# Controls: each rule refuses a doc that breaks it.


@pytest.mark.parametrize(
    "line, complaint",
    [
        ("See `payments/nowhere.py`.", "path `payments/nowhere.py`: no such file"),
        ("See [the old doc](gone.md).", "path `gone.md`: no such file"),
        ("See `nowhere_at_all.py`.", "path `nowhere_at_all.py`: no such file"),
        ("Run `checkout/tests/test_idempotency.py::test_no_such_*`.", "no test_no_such_* in"),
        ("See [buckets](strategies.md#no-such-heading).", "no heading #no-such-heading in docs/strategies.md"),
        ("See [below](#nowhere).", "no heading #nowhere in docs/control.md"),
        ("Read `checkout/services.py::NO_SUCH_SQL`.", "no NO_SUCH_SQL in checkout/services.py"),
        ("Grant `inventory.adjust_everything`.", "inventory has no adjust_everything"),
        ("Call `skincare.db.retry_forever`.", "skincare.db has no retry_forever"),
        ("Read `payments.selectors`.", "symbol `payments.selectors`: payments has no selectors"),
        ("Start-up fails with `payments.E999`.", "payments has no E999"),
        ("Run `make deploy`.", "`make deploy`: no such Makefile target"),
        ("```bash\nmake release\n```", "`make release`: no such Makefile target"),
        ("```bash\npython -m devtools.nothing\n```", "`python -m devtools.nothing`: no such module"),
    ],
)
def test_control_the_guard_refuses_a_doc_naming_what_does_not_exist(line: str, complaint: str) -> None:
    found = problems(f"# control\n\n{line}\n", name="docs/control.md")
    assert any(complaint in problem for problem in found), found


def test_control_the_guard_accepts_what_exists() -> None:
    doc = (
        "# Control\n\n"
        "`checkout/services.py`, [locking](locking.md), `idempotency.py`, `skincare.db.retry_transient`, "
        "`checkout/tests/test_idempotency.py::test_a_*`, `.env`, `payments.E001`, `make test`, `skincare.0003`, "
        "`inventory.change_product`, `checkout/services.py::ORDER_SQL`, `.venv/bin/python`, "
        "`python -m devtools.mutate`, `/v1/checkout`, `20/minute`, [buckets](strategies.md#stock-buckets), "
        "[here](#control), [ops](../docs/operations.md#production-refuses-the-demo)\n"
    )
    assert problems(doc, name="docs/control.md") == []


# Where the code sends a reader: every ``docs/….md`` (and its ``#heading``) that a file of the repository other than
# a doc names, in a comment, a docstring, an error message, a check's hint or an alert's runbook link.
CODE_DOC_LINK = re.compile(r"(?<![\w./-])docs/[\w./-]+\.md(?:#[\w-]+)?")
# The guards that feed themselves deliberately wrong docs (docs/control.md).
GUARDS_WITH_WRONG_DOCS = {"skincare/tests/test_docs.py", "skincare/tests/test_doc_claims.py"}


def code_link_problems(text: str, *, name: str) -> list[str]:
    return [
        f"{name}: {link}: {problem}"
        for link in sorted(set(CODE_DOC_LINK.findall(text)))
        if (problem := path_problem(link, linked_from=None))
    ]


def test_every_doc_the_code_links_to_exists_with_its_heading() -> None:
    found = []
    for name in tracked_files():
        path = ROOT / name
        if name.endswith(".md") or name in GUARDS_WITH_WRONG_DOCS or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        found += code_link_problems(text, name=name)
    assert not found, "\n".join(found)


def test_control_a_code_link_to_a_moved_heading_fails() -> None:
    assert code_link_problems("# runbook: docs/operations.md#skincaresweeperdown\n", name="alerts.yml") == [
        "alerts.yml: docs/operations.md#skincaresweeperdown: no heading #skincaresweeperdown in docs/operations.md"
    ]
    assert code_link_problems("(docs/runbooks/gone.md)", name="x.py") == ["x.py: docs/runbooks/gone.md: no such file"]
    assert code_link_problems("(docs/runbooks/alerts.md#skincaresweeperdown)", name="x.py") == []


# How long a doc may be: a runbook is read during an incident, the README first of all.
RUNBOOKS = sorted((ROOT / "docs" / "runbooks").glob("*.md"))
LIMITS = {"README.md": 250, "docs/runbooks": 300, "docs": 400}
# Every section (``## ``) of a runbook says, in this order, what the operator sees, does and checks.
RUNBOOK_LABELS = ("**What you see.**", "**What you do.**", "**What you check.**")


def size_problem(name: str, text: str) -> str | None:
    limit = LIMITS.get(name) or LIMITS[name.rpartition("/")[0]]
    lines = len(text.splitlines())
    return f"{name}: {lines} lines, more than {limit}" if lines > limit else None


def runbook_problems(text: str, *, name: str) -> list[str]:
    sections = re.split(r"^## ", FENCE.sub("", text), flags=re.M)[1:]
    if not sections:
        return [f"{name}: no section"]
    problems = []
    for section in sections:
        title = section.splitlines()[0]
        at = [section.find(label) for label in RUNBOOK_LABELS]
        if -1 in at or at != sorted(at):
            problems.append(f"{name}, {title}: does not say {', '.join(RUNBOOK_LABELS)} in that order")
    return problems


def test_every_doc_is_within_its_length() -> None:
    assert RUNBOOKS, "no runbook"
    found = [problem for doc in DOCS if (problem := size_problem(doc_name(doc), doc.read_text()))]
    assert not found, "\n".join(found)


def test_every_runbook_section_says_what_you_see_do_and_check() -> None:
    found = [problem for doc in RUNBOOKS for problem in runbook_problems(doc.read_text(), name=doc_name(doc))]
    assert not found, "\n".join(found)


def test_control_a_long_doc_and_a_runbook_without_its_shape_fail() -> None:
    assert size_problem("docs/runbooks/x.md", "line\n" * 301) == "docs/runbooks/x.md: 301 lines, more than 300"
    assert size_problem("docs/runbooks/x.md", "line\n" * 300) is None
    assert size_problem("docs/x.md", "line\n" * 401) == "docs/x.md: 401 lines, more than 400"
    assert size_problem("README.md", "line\n" * 251) == "README.md: 251 lines, more than 250"
    good = "# R\n\n## A\n\n**What you see.** a\n\n**What you do.** b\n\n**What you check.** c\n"
    assert runbook_problems(good, name="r.md") == []
    assert runbook_problems(good.replace("**What you check.** c\n", ""), name="r.md") == [
        "r.md, A: does not say **What you see.**, **What you do.**, **What you check.** in that order"
    ]
    swapped = good.replace("**What you see.**", "@").replace("**What you do.**", "**What you see.**")
    assert runbook_problems(swapped.replace("@", "**What you do.**"), name="r.md") != []
    assert runbook_problems("# R\n\nno sections\n", name="r.md") == ["r.md: no section"]
