"""`make run` and every target that migrates (through `make migrate`) honour MIGRATE_DATABASE_URL as the image's
entrypoint does: with DATABASE_URL pointing at PgBouncer (DB_PGBOUNCER=true), `manage.py migrate` runs on the
database itself, which `migrate` requires. The Makefile is run for real by make, with a stand-in python that records
each command and the database it was given."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
POOLER = "postgres://shop@127.0.0.1:6432/shop"
DIRECT = "postgres://shop@127.0.0.1:5432/shop"
RECORDER = """#!{python}
import json, os, sys
with open({log!r}, "a") as log:
    log.write(json.dumps({{"argv": sys.argv[1:], "DATABASE_URL": os.environ.get("DATABASE_URL"),
                           "DB_PGBOUNCER": os.environ.get("DB_PGBOUNCER")}}) + "\\n")
"""


def make_migrate(tmp_path: Path, *extra: str, environ: dict[str, str] | None = None) -> list[dict]:
    """Run `make migrate` with DATABASE_URL at the pooler; the commands the stand-in python was given."""
    make = shutil.which("make")
    if make is None:
        pytest.fail("make is not installed")
    log = tmp_path / "commands.jsonl"
    python = tmp_path / "python"
    python.write_text(RECORDER.format(python=sys.executable, log=str(log)))
    python.chmod(0o755)
    stamp = tmp_path / "installed"
    stamp.touch()  # the venv counts as installed: nothing is installed by this test
    env = {k: v for k, v in os.environ.items() if k not in ("MIGRATE_DATABASE_URL", "MAKEFLAGS", "MFLAGS")}
    env |= {"DATABASE_URL": POOLER, "DB_PGBOUNCER": "true", **(environ or {})}
    made = subprocess.run(  # noqa: S603
        [make, "--no-print-directory", "migrate", f"PY={python}", f"STAMP={stamp}", *extra],
        cwd=ROOT,
        env=env,
        check=False,
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    return [json.loads(line) for line in log.read_text().splitlines()]


def migrate_calls(commands: list[dict]) -> list[dict]:
    return [c for c in commands if c["argv"][:2] == ["manage.py", "migrate"]]


def test_make_migrate_runs_on_migrate_database_url_not_through_the_pooler(tmp_path: Path):
    [migrate] = migrate_calls(make_migrate(tmp_path, f"MIGRATE_DATABASE_URL={DIRECT}"))
    assert (migrate["DATABASE_URL"], migrate["DB_PGBOUNCER"]) == (DIRECT, "false")


def test_make_migrate_takes_migrate_database_url_from_the_environment(tmp_path: Path):
    [migrate] = migrate_calls(make_migrate(tmp_path, environ={"MIGRATE_DATABASE_URL": DIRECT}))
    assert (migrate["DATABASE_URL"], migrate["DB_PGBOUNCER"]) == (DIRECT, "false")


def test_control_without_it_migrate_gets_the_pooled_database_url(tmp_path: Path):
    [migrate] = migrate_calls(make_migrate(tmp_path))
    assert (migrate["DATABASE_URL"], migrate["DB_PGBOUNCER"]) == (POOLER, "true")
