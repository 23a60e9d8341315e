"""The development settings' one place: writes the git-ignored ``.env`` at the repository root with the labelled
demo values (``skincare.demo.DEV_ENV``) when it does not exist, and prints where ``make run`` serves.

``python -m devtools.devenv`` (``make db`` and ``make run`` run it): an existing ``.env`` is left alone, so a
developer's own values stay. ``skincare.settings`` reads the file outside production; an exported variable wins.
"""

import argparse
import os
from pathlib import Path

from skincare import demo, modes

ROOT = Path(__file__).resolve().parent.parent
DOT_ENV = ROOT / ".env"

HEADER = """\
# DEMO ONLY: written by `make run` / `make db` (devtools/devenv.py) because .env did not exist. These values are
# published in the repository; DJANGO_ENV=production refuses them. Git and Docker ignore this file. Edit it for
# your own development settings (an exported variable wins over it); delete it to get the demo values back.
"""


def ensure_development(path: Path = DOT_ENV) -> bool:
    """An existing ``.env`` from before the production switch (no ``DJANGO_ENV`` line) asks for development
    explicitly from now on: unset is production (skincare/modes.py). True when the line was appended."""
    if not path.exists() or modes.dot_env_value(path) is not None:
        return False
    with path.open("a") as file:
        file.write("# Development is asked for explicitly (unset is production); added by devtools/devenv.py\n")
        file.write("DJANGO_ENV=development\n")
    return True


def ensure(path: Path = DOT_ENV) -> bool:
    """Write ``path`` with the demo values unless it exists; True when it was written."""
    if path.exists():
        return False
    lines = [f"{name}={value}" for name, value in demo.DEV_ENV.items()]
    path.write_text(HEADER + "\n".join(lines) + "\n")
    return True


def banner(*, host: str, port: str, sweep_interval: str) -> str:
    base = f"http://{host}:{port}"
    return "\n".join(
        [
            "skincare-checkout (demo data; sandbox payments on) — Ctrl-C stops everything",
            f"  API        {base}/v1/products   (demo customer token: {demo.DEMO_CUSTOMER_TOKEN})",
            f"  API docs   {base}/v1/docs",
            f"  admin      {base}/admin/   (demo login: {demo.DEMO_OPS_USER} / {demo.DEMO_OPS_PASSWORD})",
            f"  metrics    {base}/metrics",
            f"  sweeper    expire_reservations every {sweep_interval} s "
            f"(reservations last RESERVATION_TTL_SECONDS={os.environ.get('RESERVATION_TTL_SECONDS', '1800')})",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--banner", action="store_true", help="also print where `make run` serves")
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    parser.add_argument("--port", default=os.environ.get("PORT", "8000"))
    parser.add_argument("--sweep-interval", default="2")
    args = parser.parse_args()
    if ensure():
        print(f"wrote {DOT_ENV.name} with the labelled demo settings (skincare/demo.py); edit it for your own")
    elif ensure_development():
        print(f"added DJANGO_ENV=development to {DOT_ENV.name} (unset is production)")
    if args.banner:
        print(banner(host=args.host, port=args.port, sweep_interval=args.sweep_interval), flush=True)


if __name__ == "__main__":
    main()
