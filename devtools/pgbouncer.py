"""A real PgBouncer in transaction mode in front of a PostgreSQL server, for tests, ``make scaleout`` and the
connection benchmark (development tooling, like :mod:`devtools.devdb`), running production's configuration
(``deploy/pgbouncer/pgbouncer.ini``) with its own addresses, ports and files.

Debian's ``pgbouncer`` (1.18) refuses to run as root, so as root it runs as the OS user that owns the embedded
server's data directory (``embedded_postgres``: it can reach the server's Unix socket there). It listens on
127.0.0.1 on a free port and is stopped by its pid.

    with PgBouncer.for_embedded() as bouncer:
        url = bouncer.url("skincare")   # postgres://postgres@127.0.0.1:<port>/skincare
"""

from __future__ import annotations

import configparser
import io
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from urllib.parse import parse_qs, unquote, urlparse

from devtools import devdb
from devtools.processes import free_port

# Production's PgBouncer configuration, which every PgBouncer started here runs (its places filled in: _ini).
CONFIG = Path(__file__).resolve().parent.parent / "deploy" / "pgbouncer" / "pgbouncer.ini"


class PgBouncerUnavailable(RuntimeError):
    pass


def binary() -> str | None:
    """The pgbouncer executable (Debian installs it in /usr/sbin, which is not always on PATH)."""
    return shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)), None
    )


@dataclass
class PgBouncer:
    """One pgbouncer process. ``upstream_host`` is a host name or a Unix-socket directory."""

    upstream_host: str
    upstream_port: int = 5432
    user: str = "postgres"
    password: str = ""
    # None: production's value (deploy/pgbouncer/pgbouncer.ini); a test may size the pool down to make a queue.
    default_pool_size: int | None = None
    run_as: str | None = None
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    workdir: Path | None = None

    @classmethod
    def for_embedded(cls, **kwargs: object) -> PgBouncer:
        """In front of the embedded server (started if needed) in this checkout's ``.data/pg``."""
        devdb.ensure()
        socket_dir = devdb._socket_dir()
        if socket_dir is None:
            raise PgBouncerUnavailable("the embedded PostgreSQL is not running")
        lines = (devdb.PGDATA / "postmaster.pid").read_text().splitlines()
        run_as = devdb.PGDATA.owner() if os.geteuid() == 0 else None
        return cls(upstream_host=socket_dir, upstream_port=int(lines[3]), run_as=run_as, **kwargs)  # type: ignore[arg-type]

    @classmethod
    def for_settings(cls, settings_dict: dict[str, object], **kwargs: object) -> PgBouncer:
        """In front of the server a Django DATABASES entry points at (HOST is a Unix-socket directory or a host)."""
        run_as = None
        if os.geteuid() == 0:
            run_as = devdb.PGDATA.owner() if devdb.PGDATA.exists() else "postgres"
        return cls(
            upstream_host=str(settings_dict.get("HOST") or "127.0.0.1"),
            upstream_port=int(str(settings_dict.get("PORT") or 5432)),
            user=str(settings_dict.get("USER") or "postgres"),
            password=str(settings_dict.get("PASSWORD") or ""),
            run_as=run_as,
            **kwargs,  # type: ignore[arg-type]
        )

    @classmethod
    def for_url(cls, database_url: str, **kwargs: object) -> PgBouncer:
        """In front of the server a ``postgres://`` URL names (Unix socket via ``?host=`` or TCP)."""
        parts = urlparse(database_url)
        host = parse_qs(parts.query).get("host", [parts.hostname or "127.0.0.1"])[0]
        run_as = None
        if os.geteuid() == 0:
            run_as = devdb.PGDATA.owner() if devdb.PGDATA.exists() else "postgres"
        return cls(
            upstream_host=unquote(host),
            upstream_port=parts.port or 5432,
            user=unquote(parts.username or "postgres"),
            password=unquote(parts.password or ""),
            run_as=run_as,
            **kwargs,  # type: ignore[arg-type]
        )

    def url(self, dbname: str) -> str:
        """What clients connect to: the same user and database, through this PgBouncer."""
        return f"postgres://{self.user}@127.0.0.1:{self.port}/{dbname}"

    def _ini(self) -> str:
        """Production's configuration (:data:`CONFIG`) with this process's places: the upstream server, the listening
        address and port, trust authentication from a file here, the log and pid files here; and the pool size when
        one is given. Everything else (transaction pooling, the client limit, no reset query) is production's."""
        assert self.workdir is not None
        config = configparser.ConfigParser(interpolation=None, comment_prefixes=(";", "#"), delimiters=("=",))
        config.optionxform = str  # type: ignore[assignment,method-assign]  # keys keep their case ("*")
        config.read_string(CONFIG.read_text())
        password = f" password={self.password}" if self.password else ""
        config["databases"] = {"*": f"host={self.upstream_host} port={self.upstream_port}{password}"}
        local = {
            "listen_addr": "127.0.0.1",
            "listen_port": str(self.port),
            "auth_type": "trust",
            "auth_file": str(self.workdir / "userlist.txt"),
            "logfile": str(self.workdir / "pgbouncer.log"),
            "pidfile": str(self.workdir / "pgbouncer.pid"),
        }
        if self.default_pool_size is not None:
            local["default_pool_size"] = str(self.default_pool_size)
        config["pgbouncer"].update(local)
        text = io.StringIO()
        config.write(text)
        return text.getvalue()

    def start(self, timeout: float = 30.0) -> PgBouncer:
        exe = binary()
        if exe is None:
            raise PgBouncerUnavailable("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
        if os.geteuid() == 0 and not self.run_as:
            self.run_as = "postgres"
        self.workdir = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
        (self.workdir / "userlist.txt").write_text(f'"{self.user}" ""\n')
        ini = self.workdir / "pgbouncer.ini"
        ini.write_text(self._ini())
        if self.run_as:
            entry = pwd.getpwnam(self.run_as)
            for path in (self.workdir, *self.workdir.iterdir()):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        self.proc = subprocess.Popen(
            [exe, str(ini)],
            user=self.run_as,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise PgBouncerUnavailable(f"pgbouncer exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with psycopg.connect(self.url("postgres").replace("postgres://", "postgresql://"), connect_timeout=2):
                    return
            except psycopg.Error as exc:
                last = exc
            time.sleep(0.1)
        self.stop()
        raise PgBouncerUnavailable(f"pgbouncer not ready after {timeout}s: {last}\n{self.log()}")

    def log(self) -> str:
        try:
            return (self.workdir / "pgbouncer.log").read_text() if self.workdir else ""
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # a pid we started; SIGTERM = shut down now
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def __enter__(self) -> PgBouncer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
