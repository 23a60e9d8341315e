"""What one refresh of the sale board costs the database while a sale runs (docs/operations.md#what-the-board-costs).

A throwaway database (skincare_bench_board) with the demo data; product 101 in an open sale window with a large
stock; one gunicorn (2 workers, RESERVATION_TTL_SECONDS=5) and one sweeper; SHOPPERS threads check out product 101
over HTTP for --seconds, and pay, cancel or abandon (abandoned orders expire and are swept). Meanwhile this process
runs the board's reads (backoffice.saleboard.board) every --every seconds and times them, and once, at the end of the
load, runs each of its statements under EXPLAIN (ANALYZE, BUFFERS). Checkout throughput is measured in two halves:
without the board, then with it refreshing, so the board's effect on the checkout path shows.

    python -m devtools.boardcost [--seconds 20] [--shoppers 8] [--every 0.5] [--history 0]

``--history N`` first writes N ledger rows of earlier sales of product 101 (a long-lived product's ledger).
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import threading
import time

from devtools.processes import (
    PY,
    RESULTS,
    ROOT,
    Gunicorn,
    ctl,
    django_env,
    flash_sale_setup,
    log,
    recreate_database,
    server_url,
    setup_django_quietly,
)

DBNAME = "skincare_bench_board"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.boardcost")
    parser.add_argument("--seconds", type=float, default=20.0, help="load duration (half without, half with board)")
    parser.add_argument("--shoppers", type=int, default=8)
    parser.add_argument("--every", type=float, default=0.5, help="seconds between board refreshes")
    parser.add_argument("--history", type=int, default=0, help="ledger rows of earlier sales to write first")
    args = parser.parse_args(argv)
    RESULTS.mkdir(exist_ok=True)
    url = server_url(DBNAME)
    log(f"fresh database {url.split('?')[0]}")
    recreate_database(url)
    tokens_file = RESULTS / "boardcost-tokens.json"
    ctl(url, "tokens", str(args.shoppers), "board-shopper", str(tokens_file))
    tokens: list[str] = json.loads(tokens_file.read_text())
    flash_sale_setup(url, 1_000_000, "--starts-in", "0", "--duration", "3600")
    os.environ.update(django_env(url))  # this process reads the board as a web worker would
    setup_django_quietly()
    from django.db import connection

    from backoffice import saleboard
    from devtools.scaleout import Client

    if args.history:
        with connection.cursor() as cursor:  # earlier sales: reserve + consume pairs, an hour old
            cursor.execute(
                "INSERT INTO stock_movements (product_id, bucket, available_delta, reserved_delta, reason, note, "
                "created_at) SELECT 101, 0, CASE WHEN g %% 2 = 0 THEN -1 ELSE 0 END, CASE WHEN g %% 2 = 0 THEN 1 "
                "ELSE -1 END, CASE WHEN g %% 2 = 0 THEN 'reserve' ELSE 'consume' END, 'history', "
                "now() - interval '1 hour' FROM generate_series(0, %s - 1) g",
                [args.history - args.history % 2],
            )
            cursor.execute("ANALYZE stock_movements")
        log(f"wrote {args.history} ledger rows of earlier sales")

    web = Gunicorn(url, workers=2, extra_env={"RESERVATION_TTL_SECONDS": 5, "ACCESS_LOG": "false"}).start()
    sweeper = subprocess.Popen(
        [PY, "manage.py", "expire_reservations", "--loop", "--interval", "1", "-v0"],
        cwd=ROOT,
        env=django_env(url),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = Client()
    stop = threading.Event()
    created: list[float] = []

    def shopper(i: int) -> None:
        rng = random.Random(i)
        while not stop.is_set():
            status, body = client.checkout(web.base, tokens[i], [{"product_id": 101, "qty": 1}])
            if status != 201:
                continue
            with client.lock:
                created.append(time.monotonic())
            action = rng.choices(["pay", "cancel", "abandon"], weights=[5, 2, 3])[0]
            if action == "pay":
                client.pay(web.base, body)
            elif action == "cancel":
                client.cancel(web.base, tokens[i], int(body["order_id"]))

    refreshes: list[float] = []
    plans: dict[str, dict[str, float]] = {}
    try:
        threads = [threading.Thread(target=shopper, args=(i,)) for i in range(args.shoppers)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        half = t0 + args.seconds / 2
        end = t0 + args.seconds
        stop_at = threading.Timer(args.seconds, stop.set)
        stop_at.start()
        log(f"load: {args.shoppers} shoppers for {args.seconds:.0f}s; the board from {args.seconds / 2:.0f}s on")
        while time.monotonic() < half:
            stop.wait(0.2)
        while time.monotonic() < end:
            started = time.perf_counter()
            saleboard.board()
            refreshes.append(1000 * (time.perf_counter() - started))
            stop.wait(args.every)
        plans = explain_each(connection, saleboard)
        for t in threads:
            t.join()
    finally:
        stop.set()
        sweeper.terminate()
        sweeper.wait(timeout=30)
        web.stop()
    without = sum(1 for at in created if at < half)
    with_board = sum(1 for at in created if at >= half)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM stock_movements")
        ledger_rows = cursor.fetchone()[0]
        cursor.execute("SELECT count(*) FROM orders")
        orders = cursor.fetchone()[0]
    checkouts = sorted(client.latencies.get("checkout", [0.0]))
    print("\n=== python -m devtools.boardcost ===")
    print(f"database at the end: {ledger_rows} ledger rows, {orders} orders")
    print(
        f"checkouts created: {without / (args.seconds / 2):.0f}/s without the board, "
        f"{with_board / (args.seconds / 2):.0f}/s with it refreshing every {args.every}s; "
        f"checkout p50 {1000 * checkouts[len(checkouts) // 2]:.0f} ms, p99 {1000 * checkouts[int(len(checkouts) * 0.99)]:.0f} ms"
    )
    print(
        f"board refresh (wall, in-process, {len(refreshes)} refreshes under load): p50 "
        f"{statistics.median(refreshes):.1f} ms, max {max(refreshes):.1f} ms"
    )
    total = 0.0
    for name, plan in plans.items():
        total += plan["execution_ms"]
        print(
            f"  {name:<18} execution {plan['execution_ms']:.2f} ms, planning {plan['planning_ms']:.2f} ms, "
            f"shared buffers hit {plan['hit']:.0f} read {plan['read']:.0f}"
        )
    print(f"  all statements: {total:.2f} ms of execution per refresh")
    return 0


def explain_each(connection, saleboard) -> dict[str, dict[str, float]]:  # type: ignore[no-untyped-def]
    """EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) of each statement of one refresh, with its real parameters."""
    params = {
        "span": saleboard.SERIES_SECONDS,
        "near_before": saleboard.NEAR_BEFORE_SECONDS,
        "near_after": saleboard.NEAR_AFTER_SECONDS,
        "max_products": saleboard.MAX_PRODUCTS,
        "next_expiries": saleboard.NEXT_EXPIRIES,
        "pinned": [],
    }
    found: dict[str, dict[str, float]] = {}
    with connection.cursor() as cursor:
        cursor.execute(saleboard.LEDGER_CUTOFF_SQL, params)
        params["cutoff"] = cursor.fetchone()[0]
        cursor.execute(saleboard.PRODUCTS_SQL, params)
        params["ids"] = [row[0] for row in cursor.fetchall()]
        for name, sql in (
            ("LEDGER_CUTOFF_SQL", saleboard.LEDGER_CUTOFF_SQL),
            ("PRODUCTS_SQL", saleboard.PRODUCTS_SQL),
            ("SERIES_SQL", saleboard.SERIES_SQL),
            ("SWEEPER_LAG_SQL", saleboard.SWEEPER_LAG_SQL),
        ):
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
            [plan] = cursor.fetchone()[0]
            top = plan["Plan"]
            found[name] = {
                "execution_ms": plan["Execution Time"],
                "planning_ms": plan["Planning Time"],
                "hit": top.get("Shared Hit Blocks", 0),
                "read": top.get("Shared Read Blocks", 0),
            }
    return found


if __name__ == "__main__":
    raise SystemExit(main())
