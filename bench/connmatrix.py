"""``make bench-conn``: connection handling chosen by measurement.

Matrix: {persistent connections (DB_CONN_MAX_AGE=60, health checks on), Django's psycopg pool (DB_POOL=true)} x
{PostgreSQL directly (Unix socket), through PgBouncer in transaction mode (TCP loopback)}. Each cell starts one
gunicorn (sync workers, one per core by default) on a fresh copy of the data and drives ``--clients`` concurrent
HTTP checkouts spread over products 102-108 for ``--seconds``; reported: checkouts/s, p50/p99, 5xx.

Also measured: the cost of the per-transaction ``SELECT set_config(...)`` that sets the lock/statement timeouts
(skincare.db.TIMEOUTS_SQL), as the time of a transaction with and without it, directly and through PgBouncer.

Results go to stdout and bench-results/connmatrix.json (git-ignored).
"""

import argparse
import json
import os
import statistics
import sys
import threading
import time

from devtools.pgbouncer import PgBouncer
from devtools.processes import RESULTS, Gunicorn, ctl, log
from devtools.processes import server_url as db_url
from devtools.scaleout import Client, recreate
from skincare.db import TIMEOUTS_SQL

DBNAME = "skincare_scaleout"  # the same throwaway database as make scaleout (recreated here)


def drive(base: str, tokens: list[str], *, clients: int, seconds: float) -> dict[str, float]:
    client = Client()
    stop_at = time.monotonic() + seconds

    def shopper(i: int) -> None:
        n = 0
        while time.monotonic() < stop_at:
            n += 1
            client.checkout(base, tokens[i], [{"product_id": 102 + (i + n) % 7, "qty": 1}])

    started = time.monotonic()
    threads = [threading.Thread(target=shopper, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    latencies = sorted(client.latencies.get("checkout", [0.0]))
    created = client.statuses[("checkout", 201)]
    return {
        "checkouts_per_s": round(created / elapsed, 1),
        "p50_ms": round(1000 * latencies[len(latencies) // 2], 1),
        "p99_ms": round(1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))], 1),
        "five_xx": sum(c for (_k, s), c in client.statuses.items() if s >= 500),
        "other": sum(c for (_k, s), c in client.statuses.items() if s not in (201,) and s < 500),
    }


def set_config_cost(url: str, rounds: int = 2000) -> dict[str, float]:
    """Mean microseconds of BEGIN; SELECT 1; COMMIT with and without the timeouts statement first."""
    import psycopg

    with psycopg.connect(url.replace("postgres://", "postgresql://", 1)) as conn:

        def run(with_timeouts: bool) -> float:
            started = time.perf_counter()
            for _ in range(rounds):
                with conn.transaction():
                    if with_timeouts:
                        conn.execute(TIMEOUTS_SQL, ["5000", "30000"])
                    conn.execute("SELECT 1")
            return (time.perf_counter() - started) / rounds * 1e6

        run(True)  # warm up
        samples = [(run(False), run(True)) for _ in range(3)]
    without = statistics.median(s[0] for s in samples)
    with_ = statistics.median(s[1] for s in samples)
    return {"tx_us": round(without, 1), "tx_with_set_config_us": round(with_, 1), "extra_us": round(with_ - without, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.connmatrix")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args(argv)
    RESULTS.mkdir(exist_ok=True)
    direct = db_url(DBNAME)
    tokens_file = RESULTS / "connmatrix-tokens.json"

    def fresh() -> list[str]:
        """Every cell starts from the same data: a new database, demo stock (hundreds of units of 102-108)."""
        log(f"fresh database {direct.split('?')[0]}")
        recreate(direct)
        ctl(direct, "tokens", str(args.clients), "connmatrix-buyer", str(tokens_file))
        return list(json.loads(tokens_file.read_text()))

    tokens = fresh()

    results: dict[str, object] = {}
    with PgBouncer.for_url(direct, default_pool_size=20) as bouncer:
        pooled = bouncer.url(DBNAME)
        results["set_config_direct"] = set_config_cost(direct)
        results["set_config_pgbouncer"] = set_config_cost(pooled)
        log(
            f"SET LOCAL timeouts cost: direct {results['set_config_direct']}, pgbouncer {results['set_config_pgbouncer']}"
        )
        cells = [
            ("persistent", "direct", direct, {}),
            ("pool", "direct", direct, {"DB_POOL": "true", "DB_POOL_MAX_SIZE": "2"}),
            ("persistent", "pgbouncer", pooled, {"DB_PGBOUNCER": "true"}),
            ("pool", "pgbouncer", pooled, {"DB_PGBOUNCER": "true", "DB_POOL": "true", "DB_POOL_MAX_SIZE": "2"}),
        ]
        for handling, path, url, extra in cells:
            env = {"ACCESS_LOG": "false", "RESERVATION_TTL_SECONDS": "1800", **extra}
            with Gunicorn(url, workers=args.workers, conn_max_age=60, extra_env=env) as web:
                drive(web.base, tokens, clients=args.clients, seconds=2)  # warm up
                cell = drive(web.base, tokens, clients=args.clients, seconds=args.seconds)
            results[f"{handling}/{path}"] = cell
            log(f"{handling:<10} {path:<9} {cell}")
            tokens = fresh()

    print("\n=== make bench-conn ===")
    print(f"{args.workers} sync workers, {args.clients} clients, {args.seconds:.0f}s per cell, checkouts over 102-108")
    print(f"{'handling':<11} {'path':<10} {'checkouts/s':>11} {'p50 ms':>7} {'p99 ms':>7} {'5xx':>4}")
    for key, cell in results.items():
        if "/" in key:
            handling, path = key.split("/")
            c = cell  # type: ignore[assignment]
            print(
                f"{handling:<11} {path:<10} {c['checkouts_per_s']:>11} {c['p50_ms']:>7} {c['p99_ms']:>7} {c['five_xx']:>4}"
            )  # type: ignore[index]
    for key in ("set_config_direct", "set_config_pgbouncer"):
        print(f"{key}: {results[key]}")
    (RESULTS / "connmatrix.json").write_text(json.dumps(results, indent=2))
    bad = [k for k, c in results.items() if "/" in k and c["five_xx"]]  # type: ignore[index]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
