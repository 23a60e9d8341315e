"""The external tools ``make bench`` needs: wrk (apt-get as root), matplotlib and py-spy (requirements-bench.txt into
.venv, on demand), and the directory of the embedded PostgreSQL's binaries (pgbench)."""

import os
import shutil
import subprocess

from devtools.processes import PY, ROOT, log


def ensure_tools(need_pyspy: bool = False) -> None:
    """Install what is missing: wrk (only as root, with apt-get), matplotlib, and py-spy when ``need_pyspy``."""
    if not shutil.which("wrk"):
        if os.geteuid() != 0 or not shutil.which("apt-get"):
            raise SystemExit("wrk is missing: install the Debian package `wrk` (apt-get install wrk)")
        log("installing wrk (apt-get)")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], check=False, env=env, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", "-o", "DPkg::Lock::Timeout=300", "wrk"], check=True, env=env)
    missing = []
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        missing.append("matplotlib")
    if need_pyspy and not (ROOT / ".venv/bin/py-spy").exists():
        missing.append("py-spy")
    if missing:
        log(f"installing {', '.join(missing)} from requirements-bench.txt into .venv")
        subprocess.run(
            [str(ROOT / ".venv/bin/python"), "-m", "pip", "install", "--quiet", "-r", "requirements-bench.txt"],
            cwd=ROOT,
            check=True,
        )


def pg_bindir() -> str:
    """The bin/ directory of the embedded PostgreSQL (where pgbench is)."""
    return subprocess.run(
        [PY, "-m", "devtools.devdb", "bindir"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
