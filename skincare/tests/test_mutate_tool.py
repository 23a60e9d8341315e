"""``make mutate``'s own checks, fast enough for ``make test`` (no mutant is run here).

Every configured mutation must find its target exactly once (file, qualified name, snippet with whitespace
ignored), its mutant must parse and differ from the original, and every test it names must exist: when code moves
or a test is renamed, this file fails in ``make test`` instead of ``make mutate`` rotting silently. The rest checks
the tool itself: a missing or ambiguous target, a mutant that does not parse, and a test run that errors (rather
than fails) are all errors, never "caught".
"""

import ast
import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from devtools import mutate
from devtools.mutate import MUTATIONS, Mutation, TargetError

ROOT = mutate.BASE_DIR


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_every_mutation_finds_its_target_exactly_once_and_its_mutant_parses(mutation):
    text = (ROOT / mutation.path).read_text()

    mutated = mutate.mutated_source(text, mutation)  # raises TargetError unless found exactly once and parses

    assert mutated != text
    start, end = mutate.locate(text, mutation)
    span_start, span_end = mutate.definition_span(text, mutation.where)
    assert span_start <= start < end <= span_end


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_every_test_a_mutation_names_exists(mutation):
    assert mutation.tests
    for test in mutation.tests:
        path, _, name = test.partition("::")
        function = name.partition("[")[0]
        tree = ast.parse((ROOT / path).read_text())
        defined = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
        assert function in defined, f"{mutation.name}: no test {function} in {path}"


def test_mutation_names_are_unique():
    names = [m.name for m in MUTATIONS]
    assert len(names) == len(set(names))


SOURCE = textwrap.dedent(
    '''
    LOCK_SQL = """
    SELECT bucket FROM stock_buckets
     WHERE product_id = %(product_id)s
     ORDER BY bucket
       FOR NO KEY UPDATE
    """


    class Service:
        @staticmethod
        @decorate
        def reserve(qty):
            if qty > 0:
                return qty
            return 0


    def reserve(qty):
        return qty
    '''
)


def mutation(where, original, replacement="", path="x.py"):
    return Mutation("m", "test", path, where, original, replacement, ("t.py::t",))


def test_the_snippet_is_found_in_the_named_definition_whitespace_ignored():
    reformatted = SOURCE.replace(" ORDER BY bucket\n   FOR NO KEY UPDATE", "ORDER  BY bucket FOR\n\tNO KEY UPDATE")

    mutated = mutate.mutated_source(
        reformatted, mutation("LOCK_SQL", "ORDER BY bucket FOR NO KEY UPDATE", "ORDER BY 1")
    )

    assert "FOR" not in mutated and "ORDER BY 1" in mutated
    # the method, not the module-level function of the same name; decorators belong to the definition
    assert "return -1" in mutate.mutated_source(SOURCE, mutation("Service.reserve", "return 0", "return -1"))
    assert "@decorate" not in mutate.mutated_source(SOURCE, mutation("Service.reserve", "@decorate"))
    assert "qty + 1" in mutate.mutated_source(SOURCE, mutation("reserve", "return qty", "return qty + 1"))


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        (mutation("Service.release", "return 0"), "no definition of 'release'"),
        (mutation("Missing.reserve", "return 0"), "no definition of 'Missing'"),
        (mutation("Service.reserve", "return qty + 2"), "found it 0 times"),
        (mutation("Service.reserve", "return"), "found it 2 times"),
        (mutation("Service.reserve", "if qty > 0:", "if qty >"), "does not parse"),
        (mutation("Service.reserve", "   "), "empty snippet"),
    ],
)
def test_a_missing_or_ambiguous_target_or_a_broken_mutant_is_an_error(target, problem):
    with pytest.raises(TargetError, match=problem):
        mutate.mutated_source(SOURCE, target)


def test_two_definitions_of_one_name_are_ambiguous():
    source = (
        "import sys\nif sys.platform == 'x':\n    def f():\n        return 1\nelse:\n    def f():\n        return 1\n"
    )

    with pytest.raises(TargetError, match="2 definitions of 'f'"):
        mutate.mutated_source(source, mutation("f", "return 1", "return 2"))


def test_check_mode_reports_a_target_that_moved(tmp_path, monkeypatch, capsys):
    moved = Mutation("moved", "test", "inventory/services.py", "no_such_function", "x", "y", ("t.py::t",))

    assert mutate.main(["--check"], mutations=[MUTATIONS[0], moved]) == 1

    assert "no definition of 'no_such_function'" in capsys.readouterr().out


TESTS = textwrap.dedent(
    """
    import pytest

    @pytest.fixture
    def broken():
        raise RuntimeError("set-up failed")

    def test_passes():
        assert True

    def test_fails():
        assert 1 == 2

    def test_errors(broken):
        assert True

    @pytest.fixture
    def teardown_breaks():
        yield
        raise RuntimeError("teardown failed")

    def test_fails_then_its_teardown_errors(teardown_breaks):
        assert 1 == 2
    """
)


@pytest.mark.parametrize(
    ("files", "test", "verdict"),
    [
        ({"test_x.py": TESTS}, "test_x.py::test_passes", "passed"),
        ({"test_x.py": TESTS}, "test_x.py::test_fails", "failed"),
        ({"test_x.py": TESTS}, "test_x.py::test_errors", "error"),  # a set-up error is not a caught mutant
        ({"test_x.py": TESTS}, "test_x.py::test_fails_then_its_teardown_errors", "failed"),
        ({"test_x.py": TESTS}, "test_x.py::test_renamed", "error"),  # a test that does not exist
        ({"test_x.py": TESTS + "\nimport no_such_module\n"}, "test_x.py::test_fails", "error"),  # collection error
        ({"test_x.py": TESTS + "\ndef broken(:\n"}, "test_x.py::test_fails", "error"),  # syntax error
    ],
)
def test_only_a_failing_test_is_a_failed_run_errors_are_errors(tmp_path, files, test, verdict):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PYTEST_"))}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # a bare pytest: the project's plugins are not what is tested

    run = mutate.run_tests(Path(tmp_path), (test,), env)

    assert run.verdict == verdict, run.output


@pytest.mark.parametrize("option", ["--list", "--check"])
def test_the_commands_docs_reliability_shows_work(option):
    result = subprocess.run(  # noqa: S603 - this checkout's own tool
        [sys.executable, "-m", "devtools.mutate", option], cwd=ROOT, capture_output=True, text=True, check=False
    )

    assert result.returncode == 0, result.stdout + result.stderr
    for m in MUTATIONS:
        assert option == "--check" or f"{m.path}:{m.where}" in result.stdout
    assert option == "--list" or f"all {len(MUTATIONS)} targets found exactly once" in result.stdout


def test_a_file_that_is_not_python_is_mutated_as_a_whole():
    makefile = "migrate: db\n\tDATABASE_URL=$$X $(PY) manage.py migrate\n"
    whole = Mutation("m", "what", "Makefile", mutate.MODULE, "DATABASE_URL=$$X $(PY)", "$(PY)", ("t",))
    assert mutate.mutated_source(makefile, whole) == "migrate: db\n\t$(PY) manage.py migrate\n"  # not parsed
    with pytest.raises(TargetError, match="is not Python"):
        mutate.mutated_source(makefile, dataclasses.replace(whole, where="migrate"))
    assert mutate.module_name("Makefile") == "config.settings"  # the start-up check imports the settings
