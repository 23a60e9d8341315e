"""Every `python manage.py ...` that README.md and docs/**/*.md show runs verbatim in a newcomer's shell:
from the repository root, with no DJANGO_* / PAYMENT_* variable exported but the one README's "Try it" tells them to
(``export DJANGO_ENV=development``: only the environment selects development), with a `python` that has no Django
(manage.py runs itself again with .venv/bin/python), the development settings coming from .env alone (what
`make run` writes). Only DATABASE_URL points the commands at this run's test database instead of the development one.
"""

import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.management import call_command, get_commands

from config import modes
from devtools import devenv
from skincare.tests.test_metrics import _url

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# From "python manage.py" up to the end of the command: a backtick, a comment, a redirection, a pipe, a line end.
RUN_LINE = re.compile(r"python manage\.py [a-z_]+[^`#>|\n]*")
ANY_MENTION = re.compile(r"manage\.py ([a-z_]+)")
# Every command the docs name (`manage.py X`, with or without python): a doc that names a new one fails here until
# a test covers it. The runnable `python manage.py ...` lines are all run below.
DOCUMENTED = {
    command.removeprefix("manage.py ")
    for command in (
        "manage.py admin_known_devices",
        "manage.py admin_login_unlock",
        "manage.py audit_inventory",
        "manage.py check",
        "manage.py expire_reservations",
        "manage.py flash_sale_setup",
        "manage.py issue_token",
        "manage.py migrate",
        "manage.py prune_retention",
        "manage.py reconcile_payments",
        "manage.py remove_demo_data",
        "manage.py revoke_token",
        "manage.py sale_report",
        "manage.py sequences_advance",
    )
}


def documented_lines() -> list[str]:
    seen: dict[str, None] = {}
    for doc in DOCS:
        # A command continued on the next line (a trailing backslash) is one command, as the shell reads it.
        text = re.sub(r"\\\n\s*", " ", doc.read_text())
        for match in RUN_LINE.finditer(text):
            seen.setdefault(match.group(0).strip(), None)
    return list(seen)


def newcomer_env(tmp_path: Path) -> dict[str, str]:
    """A shell with nothing exported for this project and no .venv on PATH; `python` is a Python without Django."""
    venv_bin = str(Path(sys.executable).parent)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "PAYMENT_", "MAKE", "MFLAGS", "VIRTUAL_ENV", "PYTEST"))
    }
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and Path(p).resolve() != Path(venv_bin).resolve()]
    env["PATH"] = os.pathsep.join(path)
    if shutil.which("python", path=env["PATH"]) is None:  # e.g. Debian without python-is-python3
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        (bin_dir / "python").symlink_to(getattr(sys, "_base_executable", None) or shutil.which("python3"))
        env["PATH"] = os.pathsep.join([str(bin_dir), *path])
    env["DATABASE_URL"] = _url()
    env["PORT"] = "0"  # nothing listens; a documented --metrics-port is used as shown
    return env


def test_every_command_the_docs_name_exists_and_is_covered() -> None:
    named = {name for doc in DOCS for name in ANY_MENTION.findall(doc.read_text())}
    assert named == DOCUMENTED
    assert set(get_commands()) >= DOCUMENTED
    runnable = {line.split()[2] for line in documented_lines()}
    assert runnable <= DOCUMENTED
    assert {
        "issue_token",
        "revoke_token",
        "expire_reservations",
        "audit_inventory",
        "flash_sale_setup",
        "sale_report",
    } <= runnable


def test_the_newcomers_python_has_no_django(tmp_path: Path) -> None:
    """The premise of the next test: without manage.py's re-exec, `python manage.py` would fail."""
    env = newcomer_env(tmp_path)
    result = subprocess.run(
        ["python", "-c", "import django"],  # noqa: S607 - the newcomer's python, from PATH
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0 and "No module named 'django'" in result.stderr


@pytest.mark.django_db(transaction=True)
def test_every_documented_command_runs_verbatim_in_a_fresh_shell(tmp_path: Path) -> None:
    devenv.ensure()  # what `make run` / `make db` did on this clone (an existing .env is left alone)
    call_command("load_demo_data")  # `make run` loaded it; flash_sale_setup works on product 101
    env = newcomer_env(tmp_path) | {"DJANGO_ENV": "development"}  # what Try it tells them to export
    lines = documented_lines()
    assert lines
    for line in lines:
        if "--loop" in line:
            run_until_sigterm(line, env)
            continue
        result = subprocess.run(  # noqa: S603
            ["bash", "-c", line],  # noqa: S607
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert result.returncode == 0, f"{line}\n{result.stdout}\n{result.stderr}"
        assert "Traceback" not in result.stderr, f"{line}\n{result.stderr}"


def run_until_sigterm(line: str, env: dict[str, str]) -> None:
    """A `--loop` sweeper: it sweeps once (prints its counts), then SIGTERM stops it cleanly, as the docs say."""
    process = subprocess.Popen(  # noqa: S603
        ["bash", "-c", f"exec {line}"],  # noqa: S607
        cwd=ROOT,
        env={**env, "PYTHONUNBUFFERED": "1"},  # its lines as they are printed, through the pipe
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        # Until its first sweep has printed its counts (a --metrics-port line comes before it).
        deadline = time.monotonic() + 120
        printed = ""
        while "orders cancelled" not in printed:
            ready, _, _ = select.select([process.stdout], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, f"{line}: no sweep within 120 s: {printed!r}"
            printed = process.stdout.readline()
            assert printed, f"{line}: exited: {process.stderr.read() if process.stderr else ''}"
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, f"{line}\n{err}"
    assert "expire_reservations: stopped" in out, out


TRY_IT = "export DJANGO_ENV=development"


def try_it_section() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme[readme.index("### Try it") : readme.index("\n## ", readme.index("### Try it"))]


@pytest.mark.django_db(transaction=True)
def test_a_typed_command_without_the_export_is_production_and_says_what_to_export(tmp_path: Path) -> None:
    """The one variable the commands above get is the one README's Try it block tells a newcomer to export, before
    their first ``python manage.py``; without it the same command is production and refuses, naming it."""
    section = try_it_section()
    assert TRY_IT in section and section.index(TRY_IT) < section.index("python manage.py")
    devenv.ensure()
    env = newcomer_env(tmp_path)
    refused = subprocess.run(
        ["bash", "-c", "python manage.py audit_inventory"],  # noqa: S607
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert refused.returncode != 0
    assert TRY_IT in refused.stderr and "Traceback" not in refused.stderr, refused.stderr
    # Control: exported as Try it says, the same line runs.
    ran = subprocess.run(  # noqa: S603
        ["bash", "-c", f"{TRY_IT}; python manage.py audit_inventory"],  # noqa: S607
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr


def test_make_runs_own_old_mode_line_leaves_dot_env_and_a_developers_own_stays(tmp_path: Path) -> None:
    """Older `make run`s wrote DJANGO_ENV=development to .env (docker compose reads that file for its own
    ${DJANGO_ENV}); `make run` / `make db` remove that line now, and only that line."""
    dot_env = tmp_path / ".env"
    dot_env.write_text(
        "DJANGO_ENV=development\nPAYMENT_SANDBOX=true\n"
        "# Development is asked for explicitly (unset is production); added by devtools/devenv.py\n"
        "DJANGO_ENV=development\nDATABASE_URL=postgres:///x\n"
    )
    assert devenv.drop_mode_line(dot_env)
    assert dot_env.read_text() == "PAYMENT_SANDBOX=true\nDATABASE_URL=postgres:///x\n"
    assert not devenv.drop_mode_line(dot_env)  # nothing left to remove
    # Control: a line the developer wrote differently is theirs (a contradicting one refuses at start-up).
    dot_env.write_text("export DJANGO_ENV=production\n")
    assert not devenv.drop_mode_line(dot_env)
    # And the .env a fresh clone's `make run` writes names no mode at all.
    fresh = tmp_path / "fresh.env"
    assert devenv.ensure(fresh)
    assert modes.dot_env_value(fresh) is None
