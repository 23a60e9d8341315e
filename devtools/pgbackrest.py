"""pgBackRest and a PostgreSQL server it can back up, for ``make restore-rehearsal`` (Debian's ``pgbackrest`` 2.45
and ``postgresql-15``, installed by ``make pgbackrest-deps``).

pgBackRest 2.45 supports PostgreSQL up to 15 (run against the embedded PostgreSQL 18 its ``stanza-create`` stops with
"is this version of PostgreSQL supported?"), so the rehearsal's server is Debian's PostgreSQL 15, in
``.data/restore/`` (git-ignored), run as the OS user ``postgres`` (PostgreSQL refuses root), on 127.0.0.1 and a Unix
socket of its own. WAL is archived by ``archive_command = pgbackrest archive-push`` with ``archive_timeout``: a
segment is archived at the latest that many seconds after its first write, which bounds what a lost host loses.

:func:`server_settings` and :func:`render_config` are pure (``skincare/tests/test_rehearsal_config.py``).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from devtools.processes import free_port

PG_BIN = Path("/usr/lib/postgresql/15/bin")
STANZA = "shop"
OS_USER = "postgres"
ARCHIVE_TIMEOUT_SECONDS = 5


def server_settings(*, port: int, socket_dir: Path, config: Path, archive: bool) -> dict[str, str]:
    """postgresql.conf lines of a server whose WAL pgBackRest archives (``archive``) or not (a restored copy)."""
    settings = {
        "listen_addresses": "'127.0.0.1'",
        "port": str(port),
        "unix_socket_directories": f"'{socket_dir}'",
        "max_connections": "200",
        "wal_level": "replica",
        "archive_mode": "on" if archive else "off",
        "archive_timeout": f"{ARCHIVE_TIMEOUT_SECONDS}s",
        # a copy restored from a Patroni node would otherwise wait at every commit for the cluster's standby
        "synchronous_standby_names": "''",
    }
    if archive:
        settings["archive_command"] = f"'{archive_command(config)}'"
    return settings


def render_config(*, repo: Path, logs: Path, hosts: list[tuple[Path, int, Path]]) -> str:
    """pgbackrest.conf: one repository on local disk, one stanza for the servers ``hosts`` ((data directory, port,
    socket directory) each: one server, or the nodes of a Patroni cluster; pgBackRest backs up the primary)."""
    lines = [
        "[global]",
        f"repo1-path={repo}",
        "repo1-retention-full=2",
        f"log-path={logs}",
        f"lock-path={logs}",
        "log-level-console=warn",
        "log-level-file=info",
        "start-fast=y",
        "compress-type=lz4",
        "",
        f"[{STANZA}]",
    ]
    for n, (pgdata, port, socket_dir) in enumerate(hosts, start=1):
        lines += [
            f"pg{n}-path={pgdata}",
            f"pg{n}-port={port}",
            f"pg{n}-socket-path={socket_dir}",
            f"pg{n}-user=postgres",
        ]
    return "\n".join([*lines, ""])


def archive_command(config: Path, *, pgdata: str = "") -> str:
    """The ``archive_command`` pushing a server's WAL into the stanza (``pgdata``: that server's data directory, for a
    configuration that names several)."""
    where = f" --pg1-path={pgdata}" if pgdata else ""
    return f"pgbackrest --config={config} --stanza={STANZA}{where} archive-push %p"


def give_to_postgres(path: Path) -> None:
    """``path`` and everything under it owned by the OS user ``postgres`` (when run as root)."""
    if os.geteuid() == 0:
        user = pwd.getpwnam(OS_USER)
        for entry in [path, *path.rglob("*")]:
            os.chown(entry, user.pw_uid, user.pw_gid)


def as_postgres(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """A command run as the OS user ``postgres`` (from root), or as is (not root)."""
    if os.geteuid() == 0:
        argv = ("runuser", "-u", OS_USER, "--", *argv)
    proc = subprocess.run(list(argv), capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return proc


@dataclass
class Server:
    """One PostgreSQL 15 data directory under ``base`` (its socket in ``base/sock``), started and stopped by pg_ctl."""

    base: Path
    port: int = 0

    def __post_init__(self) -> None:
        self.port = self.port or free_port()

    @property
    def pgdata(self) -> Path:
        return self.base / "pgdata"

    @property
    def socket_dir(self) -> Path:
        return self.base / "sock"

    def url(self, dbname: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{dbname}"

    def conninfo(self, dbname: str) -> str:
        return f"host=127.0.0.1 port={self.port} dbname={dbname} user=postgres connect_timeout=5"

    def prepare_dirs(self) -> None:
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        give_to_postgres(self.base)

    def initdb(self, settings: dict[str, str]) -> None:
        self.prepare_dirs()
        as_postgres(str(PG_BIN / "initdb"), "-D", str(self.pgdata), "-U", "postgres", "-A", "trust", "--no-sync")
        self.configure(settings)

    def configure(self, settings: dict[str, str]) -> None:
        """``settings`` appended to postgresql.auto.conf (they win over postgresql.conf and a restore's own)."""
        with open(self.pgdata / "postgresql.auto.conf", "a") as conf:
            conf.writelines(f"{name} = {value}\n" for name, value in settings.items())

    def start(self) -> None:
        self.prepare_dirs()
        log_file = self.base / "postgresql.log"
        as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.pgdata), "-l", str(log_file), "-w", "-t", "120", "start")

    def stop(self) -> None:
        if (self.pgdata / "postmaster.pid").exists():
            as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.pgdata), "-m", "fast", "-w", "stop", check=False)

    def log(self) -> str:
        try:
            return (self.base / "postgresql.log").read_text()
        except OSError:
            return ""


@dataclass
class Repository:
    """pgBackRest's repository and configuration (``base/repo``, ``base/pgbackrest.conf``) for ``hosts``: (data
    directory, port, socket directory) of one server or of each node of a cluster."""

    base: Path
    hosts: list[tuple[Path, int, Path]]

    @classmethod
    def for_server(cls, base: Path, server: Server) -> Repository:
        return cls(base, [(server.pgdata, server.port, server.socket_dir)])

    @property
    def config(self) -> Path:
        return self.base / "pgbackrest.conf"

    def write_config(self) -> None:
        (self.base / "repo").mkdir(parents=True, exist_ok=True)
        (self.base / "log").mkdir(parents=True, exist_ok=True)
        self.config.write_text(render_config(repo=self.base / "repo", logs=self.base / "log", hosts=self.hosts))

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return as_postgres("pgbackrest", f"--config={self.config}", f"--stanza={STANZA}", *args)

    def timed(self, *args: str) -> float:
        started = time.monotonic()
        self.run(*args)
        return time.monotonic() - started


def binaries_missing() -> list[str]:
    missing = [] if shutil.which("pgbackrest") else ["pgbackrest"]
    return missing + ([] if (PG_BIN / "postgres").exists() else [str(PG_BIN / "postgres")])
