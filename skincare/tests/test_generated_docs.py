"""The generated docs (``devtools/docgen.py``, ``make docs``): the README's error table and docs/configuration.md's
tables are what the code declares, and what they are made from is complete.

- the committed README.md and docs/configuration.md equal what ``python -m devtools.docgen`` would write, and the
  command's ``--check`` says so;
- every environment variable the product reads is declared in ``config/variables.py``, and every declared one is
  read (the product's Python source, scanned);
- the error table has a row for every exposed ``DomainError`` of every app, with its status, and its other codes are
  the API layer's own (``skincare.errors.FRAMEWORK_CODES``).

Each rule has a control that feeds it a wrong doc or wrong code.
"""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from config.variables import SECTIONS, VARIABLES, Variable
from devtools import docgen
from skincare import errors
from skincare.errors import DomainError, declared_errors

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_docs_are_the_generated_ones() -> None:
    assert docgen.stale() == [], "run `make docs`"


def test_the_documented_check_runs_and_passes() -> None:
    """``python -m devtools.docgen --check``, as ``make docs``' comment and the docs name it, in a process of its
    own (it sets Django up itself)."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    result = subprocess.run(
        [sys.executable, "-m", "devtools.docgen", "--check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "up to date" in result.stdout


def test_every_variable_the_product_reads_is_declared_and_every_declared_one_is_read() -> None:
    sources = docgen.product_sources()
    assert {"config/settings.py", "config/gunicorn.conf.py", "config/modes.py", "skincare/metrics.py"} <= set(sources)
    assert docgen.variable_problems(sources) == []
    read, _ = docgen.variables_read(sources)
    # Read by the helpers (env_int, gunicorn's _int), by a module constant (DJANGO_ENV) and outside config/.
    assert {"WEB_THREADS", "PORT", "DJANGO_ENV", "PROMETHEUS_MULTIPROC_DIR", "DJANGO_ALLOWED_HOSTS"} <= set(read)


def test_the_error_table_has_a_row_for_every_exposed_code_with_its_status() -> None:
    rows = docgen.error_rows()
    listed = {code: status for status, codes, _ in rows for code in codes}
    declared = declared_errors()
    assert {code: cls.http_status for code, cls in declared.items() if cls.expose} == {
        code: status for code, status in listed.items() if code in declared and declared[code].expose
    }
    assert {code for code in listed if code not in declared or not declared[code].expose} <= errors.FRAMEWORK_CODES
    assert "inventory_corrupted" in declared and "inventory_corrupted" not in listed  # never sent
    assert [status for status, _, _ in rows] == sorted(status for status, _, _ in rows)
    # The rows that group several codes: the classes whose text is the framework's row's.
    assert ("invalid_request", "malformed_json") in [codes for _, codes, _ in rows]
    assert {"order_not_found", "product_not_found", "cart_not_found", "not_found"} in [set(c) for _, c, _ in rows]


def test_the_table_sees_the_codes_of_every_app() -> None:
    """The declared codes come from every installed app's exceptions module, loaded or not."""
    codes = declared_errors()
    assert {"stock_conflict", "order_not_found", "rate_limited", "cart_expired", "busy", "sale_ended"} <= set(codes)


# Controls: each rule refuses a wrong doc or wrong code.


def _copy_docs(tmp_path: Path) -> Path:
    for name in (docgen.README, docgen.CONFIGURATION):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((ROOT / name).read_text())
    return tmp_path


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


def test_control_an_edited_row_is_caught_and_make_docs_writes_it_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _copy_docs(tmp_path)
    assert docgen.stale(root) == []
    _edit(root / "README.md", "| 409 | `stock_conflict` | not enough stock;", "| 409 | `stock_conflict` | no stock;")
    assert docgen.stale(root) == ["README.md"]
    _edit(root / "docs/configuration.md", "| `DB_LOCK_TIMEOUT_MS` | `5000` |", "| `DB_LOCK_TIMEOUT_MS` | `500` |")
    assert docgen.stale(root) == ["README.md", "docs/configuration.md"]
    with pytest.raises(SystemExit) as refused:
        docgen.main(["--check"], root=root)
    assert "README.md: differs" in str(refused.value) and "docs/configuration.md: differs" in str(refused.value)
    docgen.main([], root=root)
    assert "rewrote README.md, docs/configuration.md" in capsys.readouterr().out
    assert docgen.stale(root) == []
    assert (root / "README.md").read_text() == (ROOT / "README.md").read_text()


def test_control_a_row_removed_or_written_outside_the_markers_is_caught(tmp_path: Path) -> None:
    root = _copy_docs(tmp_path)
    readme = root / "README.md"
    row = next(line for line in readme.read_text().splitlines() if line.startswith("| 410 | `sale_ended` |"))
    _edit(readme, row + "\n", "")
    assert docgen.stale(root) == ["README.md"]
    _edit(readme, docgen.MARK_END + "\n", docgen.MARK_END + "\n" + row + "\n")  # moved below the table
    assert docgen.stale(root) == ["README.md"]
    _edit(readme, docgen.MARK_END + "\n", "")
    with pytest.raises(docgen.DocgenError, match="needs one line"):
        docgen.stale(root)


def test_control_a_domain_error_without_when_is_refused_at_class_definition() -> None:
    with pytest.raises(TypeError, match="declares the error code 'made_up_refusal' but no `when`"):

        class MadeUpRefusal(DomainError):
            code = "made_up_refusal"
            http_status = 409

    with pytest.raises(TypeError, match="no `when`"):

        class BlankWhen(DomainError):
            code = "made_up_blank"
            http_status = 409
            when = " "

    assert "made_up_refusal" not in declared_errors() and "made_up_blank" not in declared_errors()


def test_control_a_new_error_class_makes_the_committed_readme_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A class declared with its ``when`` is accepted and is a row of its status: the committed README lacks it
    until ``make docs`` writes it."""
    monkeypatch.setattr(errors, "_DECLARED", dict(errors._DECLARED))  # the made-up class leaves no trace

    class MadeUpConflict(DomainError):
        code = "made_up_conflict"
        http_status = 409
        when = "a made-up refusal"

    assert (409, ("made_up_conflict",), "a made-up refusal") in docgen.error_rows()
    assert docgen.stale(_copy_docs(tmp_path)) == ["README.md"]


@pytest.mark.parametrize(
    ("answer", "complaint"),
    [
        (errors.Answer(409, ("no_such_refusal",), "made up"), "no_such_refusal is not one of FRAMEWORK_CODES"),
        (errors.Answer(409, ("stock_conflict",), "again"), "stock_conflict is not one of FRAMEWORK_CODES"),
        (errors.Answer(400, ("not_found",), "twice"), "error code 'not_found' would be in two rows"),
    ],
)
def test_control_a_framework_row_with_a_code_that_is_not_its_own_is_refused(
    monkeypatch: pytest.MonkeyPatch, answer: errors.Answer, complaint: str
) -> None:
    monkeypatch.setattr(errors, "FRAMEWORK_ANSWERS", (*errors.FRAMEWORK_ANSWERS, answer))
    with pytest.raises(docgen.DocgenError, match=complaint):
        docgen.error_rows()


def test_control_an_undeclared_or_unread_variable_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    sources = docgen.product_sources()
    made_up = {**sources, "made/up.py": 'LIMIT = env_int("MADE_UP_LIMIT", 3)\n'}
    assert docgen.variable_problems(made_up) == [
        "MADE_UP_LIMIT is read (made/up.py:1) but not declared in config/variables.py"
    ]
    unread = (*VARIABLES, Variable("NOBODY_READS_ME", default="`1`", meaning="nothing", section=SECTIONS[-1]))
    assert docgen.variable_problems(sources, unread) == [
        "NOBODY_READS_ME is declared in config/variables.py but nothing reads it"
    ]
    computed = {**sources, "made/up.py": "import os\nVALUE = os.environ.get(pick())\n"}
    assert docgen.variable_problems(computed) == ["made/up.py:2: reads a variable whose name is not a literal (pick())"]
    # And the generator refuses to write a doc from such code.
    monkeypatch.setattr(docgen, "product_sources", lambda: made_up)
    with pytest.raises(docgen.DocgenError, match="MADE_UP_LIMIT is read"):
        docgen.generated()


def test_control_every_form_of_a_read_is_found() -> None:
    source = (
        "import os\n"
        'NAME = "BY_CONSTANT"\n'
        "def helper(name, default):\n"
        "    return os.environ.get(name, default)\n"
        "def _int(name):\n"
        "    return helper(name, 1)\n"
        'A = env("BY_ENV", default="")\n'
        'B = env.list(\n    "BY_ENV_LIST")\n'
        'C = os.environ.get("BY_GET")\n'
        'D = os.environ["BY_SUBSCRIPT"]\n'
        'E = os.getenv("BY_GETENV")\n'
        'F = _int("BY_HELPERS_HELPER")\n'
        "G = os.environ.get(NAME)\n"
        'os.environ["WRITTEN_ONLY"] = "x"\n'
        'os.environ.setdefault("DEFAULTED_ONLY", "x")\n'
        'H = "TESTED_ONLY" in os.environ\n'
    )
    read, unknown = docgen.variables_read({"x.py": source})
    assert unknown == []
    assert set(read) == {
        "BY_CONSTANT",
        "BY_ENV",
        "BY_ENV_LIST",
        "BY_GET",
        "BY_SUBSCRIPT",
        "BY_GETENV",
        "BY_HELPERS_HELPER",
    }


def test_control_a_cell_that_would_break_its_table_is_refused() -> None:
    broken = dataclasses.replace(VARIABLES[0], meaning="one | two")
    with pytest.raises(docgen.DocgenError, match=f"{broken.name}: a table cell must be one line"):
        docgen.configuration_tables([broken, *VARIABLES[1:]])
    with pytest.raises(docgen.DocgenError, match="twice"):
        docgen.configuration_tables([*VARIABLES, VARIABLES[0]])
    with pytest.raises(docgen.DocgenError, match="not in SECTIONS"):
        docgen.configuration_tables([dataclasses.replace(VARIABLES[0], section="## Nowhere")])
    assert docgen.configuration_tables() in (ROOT / "docs/configuration.md").read_text()  # control: as committed
