"""The external tools the bench needs: wrk (installed with apt-get when missing and running as root) and pgbench (from
the embedded PostgreSQL's binaries)."""

import os
import shutil
import subprocess

from devtools.processes import PY, ROOT, log


def ensure_tools() -> None:
    """wrk, installed with apt-get when it is missing (only as root)."""
    if shutil.which("wrk"):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise SystemExit("wrk is missing: install the Debian package `wrk` (apt-get install wrk)")
    log("installing wrk (apt-get)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=False, env=env, capture_output=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", "-o", "DPkg::Lock::Timeout=300", "wrk"], check=True, env=env)


def pg_bindir() -> str:
    """The bin/ directory of the embedded PostgreSQL (where pgbench is)."""
    return subprocess.run(
        [PY, "-m", "devtools.devdb", "bindir"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
