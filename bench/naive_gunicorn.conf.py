"""TEST-ONLY gunicorn config: the project's gunicorn settings plus the naive read-check-write stock reservation
(``bench.naive``) patched into every worker. Used by ``python -m bench loadtest --naive`` to show an oversell."""

import runpy
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
_PROJECT = next(p for p in (_ROOT / "config/gunicorn.conf.py", _ROOT / "skincare/gunicorn.conf.py") if p.exists())
globals().update({key: value for key, value in runpy.run_path(str(_PROJECT)).items() if not key.startswith("__")})


def post_worker_init(worker):
    from bench import naive

    naive.install()
    worker.log.warning("bench.naive: inventory.reserve.stock_reserve replaced by a read-check-write (TEST ONLY)")
