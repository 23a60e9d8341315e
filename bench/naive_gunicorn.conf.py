"""TEST-ONLY gunicorn config: the project's settings plus the naive read-check-write stock reservation
(``bench.naive``) patched into every worker. Used by ``python -m bench.loadtest --naive`` to show an oversell."""

import runpy
from pathlib import Path

globals().update(
    {
        key: value
        for key, value in runpy.run_path(
            str(Path(__file__).resolve().parent.parent / "skincare/gunicorn.conf.py")
        ).items()
        if not key.startswith("__")
    }
)


def post_worker_init(worker):
    from bench import naive

    naive.install()
    worker.log.warning("bench.naive: inventory.reserve.stock_reserve replaced by a read-check-write (TEST ONLY)")
