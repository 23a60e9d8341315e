"""The development settings' one place: writes the git-ignored ``.env`` at the repository root with the labelled
demo values (``skincare.demo.DEV_ENV``) when it does not exist, and prints where ``make run`` serves.

``python -m devtools.devenv`` (``make run`` runs it): an existing ``.env`` is left alone, so a developer's own values
stay. ``python -m devtools.devenv --database`` (``make db``) also starts the embedded PostgreSQL and writes its
``DATABASE_URL`` to ``.env``, unless a database is given (``DATABASE_URL`` exported, or a line of the developer's own
in ``.env``). ``config.settings`` reads the file outside production, like any other setting (it never imports
development tooling); an exported variable wins.
"""

import argparse
import os
import re
from pathlib import Path

from devtools import devdb
from skincare import demo

ROOT = Path(__file__).resolve().parent.parent
DOT_ENV = ROOT / ".env"

HEADER = """\
# DEMO ONLY: written by `make run` / `make db` (devtools/devenv.py) because .env did not exist. These values are
# published in the repository; DJANGO_ENV=production refuses them. Git and Docker ignore this file. Edit it for
# your own development settings (an exported variable wins over it); delete it to get the demo values back.
# Only a process whose environment has DJANGO_ENV=development reads it (make run exports it; a DJANGO_ENV line
# here never selects the mode).
"""


def ensure(path: Path = DOT_ENV) -> bool:
    """Write ``path`` with the demo values unless it exists; True when it was written."""
    if path.exists():
        return False
    lines = [f"{name}={value}" for name, value in demo.DEV_ENV.items()]
    path.write_text(HEADER + "\n".join(lines) + "\n")
    return True


# What make run / make db wrote to .env before only the environment selected the mode (a demo line, and the line
# appended to older files with its comment). Harmless to the settings now, but docker compose reads the same file
# for its own ${DJANGO_ENV}: removed, so that no .env of ours names a mode.
_OUR_MODE_LINES = re.compile(
    r"^(?:# Development is asked for explicitly \(unset is production\); added by devtools/devenv\.py\n)?"
    r"DJANGO_ENV=development\n",
    re.MULTILINE,
)


def drop_mode_line(path: Path = DOT_ENV) -> bool:
    """Remove the ``DJANGO_ENV=development`` line (and its comment) that earlier versions of this module wrote to
    ``path``; a line of the developer's own in any other form stays. True when something was removed."""
    if not path.exists():
        return False
    text = path.read_text()
    kept = _OUR_MODE_LINES.sub("", text)
    if kept == text:
        return False
    path.write_text(kept)
    return True


_DATABASE_URL_LINE = re.compile(r"^\s*(?:export\s+)?DATABASE_URL\s*=\s*(.*?)\s*$", re.MULTILINE)


def dot_env_database_url(path: Path = DOT_ENV) -> str | None:
    """The value of ``path``'s last ``DATABASE_URL=`` line, or None (no file, no line)."""
    if not path.exists():
        return None
    found = _DATABASE_URL_LINE.findall(path.read_text())
    return found[-1] if found else None


def ensure_database_url(url: str, path: Path = DOT_ENV) -> bool:
    """Give ``path`` the line ``DATABASE_URL=<url>`` (the embedded server's) unless it has a ``DATABASE_URL`` line
    already; True when the line was added."""
    if dot_env_database_url(path) is not None:
        return False
    with path.open("a") as file:
        file.write("# The embedded PostgreSQL (make db, devtools/devdb.py); replace it to use another database\n")
        file.write(f"DATABASE_URL={url}\n")
    return True


def database(path: Path = DOT_ENV) -> str:
    """``make db``: the database development uses, started when it is the embedded one. Returns what was done."""
    if os.environ.get("DATABASE_URL"):
        return "using DATABASE_URL"
    given = dot_env_database_url(path)
    if given is not None and not devdb.is_embedded(given):
        return f"using {path.name}'s DATABASE_URL"
    url = devdb.ensure()
    added = ensure_database_url(url, path)
    return "embedded PostgreSQL 18 up (.data/pg)" + (f"; its DATABASE_URL written to {path.name}" if added else "")


def banner(*, host: str, port: str, sweep_interval: str) -> str:
    base = f"http://{host}:{port}"
    return "\n".join(
        [
            "skincare-checkout (demo data; sandbox payments on) — Ctrl-C stops everything",
            f"  API        {base}/v1/products   (demo customer token: {demo.DEMO_CUSTOMER_TOKEN})",
            f"  API docs   {base}/v1/docs",
            f"  admin      {base}/admin/   (demo login: {demo.DEMO_OPS_USER} / {demo.DEMO_OPS_PASSWORD})",
            f"  metrics    {base}/metrics",
            "  manage.py  in another terminal: export DJANGO_ENV=development first (without it a process is "
            "production)",
            f"  sweeper    expire_reservations every {sweep_interval} s "
            f"(reservations last RESERVATION_TTL_SECONDS={os.environ.get('RESERVATION_TTL_SECONDS', '1800')})",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--banner", action="store_true", help="also print where `make run` serves")
    parser.add_argument(
        "--database", action="store_true", help="also start the embedded PostgreSQL and write its URL to .env"
    )
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    parser.add_argument("--port", default=os.environ.get("PORT", "8000"))
    parser.add_argument("--sweep-interval", default="2")
    args = parser.parse_args()
    if ensure():
        print(f"wrote {DOT_ENV.name} with the labelled demo settings (skincare/demo.py); edit it for your own")
    elif drop_mode_line():
        print(f"removed DJANGO_ENV=development from {DOT_ENV.name}: only the environment selects the mode")
    if args.database:
        print(database(), flush=True)
    if args.banner:
        print(banner(host=args.host, port=args.port, sweep_interval=args.sweep_interval), flush=True)


if __name__ == "__main__":
    main()
