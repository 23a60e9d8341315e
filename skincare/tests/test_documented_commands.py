"""Every `python manage.py ...` that README.md and docs/*.md show runs verbatim in a newcomer's shell (issue 20):
from the repository root, with no DJANGO_* / PAYMENT_* variable exported, with a `python` that has no Django
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

from devtools import devenv
from skincare.tests.test_metrics import _url

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# From "python manage.py" up to the end of the command: a backtick, a comment, a redirection, a pipe, a line end.
RUN_LINE = re.compile(r"python manage\.py [a-z_]+[^`#>|\n]*")
ANY_MENTION = re.compile(r"manage\.py ([a-z_]+)")
# Every command the docs name (`manage.py X`, with or without python): a doc that names a new one fails here until
# a test covers it. The runnable `python manage.py ...` lines are all run below.
DOCUMENTED = {
    command.removeprefix("manage.py ")
    for command in (
        "manage.py admin_login_unlock",
        "manage.py audit_inventory",
        "manage.py check",
        "manage.py expire_reservations",
        "manage.py flash_sale_setup",
        "manage.py issue_token",
        "manage.py migrate",
        "manage.py prune_retention",
        "manage.py remove_demo_data",
        "manage.py revoke_token",
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
    assert {"issue_token", "revoke_token", "expire_reservations", "audit_inventory", "flash_sale_setup"} <= runnable


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
    devenv.ensure()  # what `make run` / `make db` did on this clone (an existing .env is left alone) ...
    devenv.ensure_development()  # ... but for the DJANGO_ENV=development line they add to an older one
    call_command("load_demo_data")  # `make run` loaded it; flash_sale_setup works on product 101
    env = newcomer_env(tmp_path)
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
