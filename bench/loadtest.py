"""``make loadtest``: Locust swarm checks against a gunicorn stack on 127.0.0.1.

Profiles (each ends with the invariant checks in locustfile.py: audit_inventory and "no oversell"):

1. flash-100    flash_sale_setup --stock 1, then 100 FlashSaleBuyers each send ONE checkout of product 101,
                released together. Must end with exactly 1 created, 99 conflicts, no 5xx, audit clean.
2. mixed        Shoppers (browse, buy 102-108, pay by signed webhook, cancel), CartShoppers (build a cart, wait,
                check it out; a quarter after the cart expired: carts live SWARM_CART_TTL_SECONDS here) and
                WebhookReplayers for a bounded time (default 30 s). No failure, every replay a duplicate, every
                late cart a 410, no cart checked out twice, audit clean.
3. opening      a sale window (docs/sale-windows.md): flash_sale_setup --stock 50 --starts-in 15 --price 99000
                --max-per-customer 1; 300 OpeningBuyers poll product 101, count down from seconds_to_start and fire
                at the opening. Must end with exactly 50 created at the sale price, none before sale_starts_at, the
                rest 409 stock_conflict, no 5xx, audit clean; reports p50/p99 of the opening second and how many
                buyers were answered within 1 s of the opening.
4. ticket-1000  the seed's ticket case: 1000 buyers, one unit, exactly one sale.

``--naive`` (or BENCH_NAIVE=1) serves the same stack with bench/naive_gunicorn.conf.py, which swaps the stock
reservation for a read-check-write (TEST ONLY): the run must then FAIL with an oversell. It uses its own
throwaway database (skincare_naive) so the corrupted counters never reach another run.

Each run uses a fresh database (skincare_loadtest, or skincare_naive) on the embedded PostgreSQL, or on the
server DATABASE_URL points at. ``--host URL`` targets an already running stack instead (then DATABASE_URL must
name that stack's database, and the profiles run against its data).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from devtools.processes import (
    BENCH_SECRET,
    RESULTS,
    ROOT,
    Gunicorn,
    ctl,
    django_env,
    flash_sale_setup,
    log,
    recreate_database,
    without_runtime_dir_warning,
)
from devtools.processes import server_url as db_url
from skincare import demo

LOCUST = str(ROOT / ".venv/bin/locust")


# Carts expire after a few seconds in the swarm, so that some CartShoppers check out after the expiry (410).
SWARM_CART_TTL_SECONDS = 5


def run_locust(
    *,
    name: str,
    base: str,
    url: str,
    secret: str,
    users: int,
    classes: list[str],
    run_time: str,
    tokens_file: Path,
    burst: int = 0,
    stock: int = 1,
    since_order_id: int | None = None,
    extra_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    summary_path = RESULTS / f"loadtest-{name}.json"
    summary_path.unlink(missing_ok=True)
    # The swarm checks at the end run manage.py audit_inventory / devtools.djangoctl: they need the same Django
    # environment as the server (labelled bench-only secret key, see devtools.processes.django_env).
    env = django_env(url)
    env.update(
        {
            "PAYMENT_WEBHOOK_SECRET": secret,
            "LOADTEST_TOKENS_FILE": str(tokens_file),
            "FLASH_SALE_STOCK": str(stock),
            "FLASH_SALE_BURST": str(burst),
            "LOADTEST_SUMMARY": str(summary_path),
            "CART_TTL_SECONDS": str(SWARM_CART_TTL_SECONDS),
        }
    )
    if since_order_id is not None:
        env["FLASH_SALE_SINCE_ORDER_ID"] = str(since_order_id)
    env.update(extra_env or {})
    cmd = [
        LOCUST,
        "-f",
        "locustfile.py",
        "--headless",
        "--only-summary",
        "-H",
        base,
        "-u",
        str(users),
        "-r",
        str(users),
        "--run-time",
        run_time,
        "--stop-timeout",
        "10",
        "--loglevel",
        "WARNING",
        *classes,
    ]
    log(f"profile {name}: {users} users {' '.join(classes)}, up to {run_time}")
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - started
    out = "\n".join(without_runtime_dir_warning(proc.stdout + proc.stderr))
    (RESULTS / f"loadtest-{name}.log").write_text(out)
    print(out, flush=True)
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {"violations": ["no summary written"]}
    summary.update({"name": name, "exit_code": proc.returncode, "seconds": round(elapsed, 1)})
    return summary


OPENING_BUYERS, OPENING_STOCK, OPENING_STARTS_IN = 300, 50, 15


def opening(*, base: str, url: str, secret: str, tokens_file: Path) -> dict[str, Any]:
    """The opening second of a sale window: OPENING_BUYERS poll, count down and fire at the opening for
    OPENING_STOCK units at the sale price, one per customer."""
    since = flash_sale_setup(
        url,
        OPENING_STOCK,
        *("--starts-in", str(OPENING_STARTS_IN), "--duration", "600", "--price", "99000", "--max-per-customer", "1"),
    )
    result = run_locust(
        name="opening",
        base=base,
        url=url,
        secret=secret,
        users=OPENING_BUYERS,
        classes=["OpeningBuyer"],
        run_time=f"{OPENING_STARTS_IN + 120}s",
        tokens_file=tokens_file,
        stock=OPENING_STOCK,
        since_order_id=since,
        extra_env={"OPENING_BUYERS": str(OPENING_BUYERS)},
    )
    result["expect"] = f"exactly {OPENING_STOCK} created at the sale price, none before the opening"
    if result.get("created") != OPENING_STOCK:
        result.setdefault("violations", []).append(f"expected {OPENING_STOCK} sales, got {result.get('created')}")
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.loadtest")
    parser.add_argument("--naive", action="store_true", help="TEST ONLY: serve with the read-check-write reservation")
    parser.add_argument("--host", help="an already running stack (http://127.0.0.1:PORT) instead of starting one")
    parser.add_argument("--mixed-seconds", type=int, default=30)
    parser.add_argument(
        "--workers", type=int, default=int(os.environ.get("WEB_CONCURRENCY", (os.cpu_count() or 2) + 1))
    )
    parser.add_argument("--only", action="append", metavar="PROFILE", help="run only these profiles (repeatable)")
    args = parser.parse_args(argv)

    def wanted(profile: str) -> bool:
        return not args.only or profile in args.only

    naive = args.naive or os.environ.get("BENCH_NAIVE") == "1"
    RESULTS.mkdir(exist_ok=True)

    if args.host:
        if not args.host.startswith(("http://127.0.0.1", "http://localhost")):
            raise SystemExit("--host must be on 127.0.0.1/localhost")
        url = os.environ.get("DATABASE_URL") or db_url("skincare")
    else:
        url = db_url("skincare_naive" if naive else "skincare_loadtest")
        log(f"fresh database {url.split('?')[0]}")
        recreate_database(url)
    tokens_file = RESULTS / "loadtest-tokens.json"
    log("issuing 1000 customer tokens (manage.py issue_token, one per buyer)")
    ctl(url, "tokens", "1000", "loadtest-buyer", str(tokens_file))

    server = None
    if not args.host:
        config = "bench/naive_gunicorn.conf.py" if naive else None
        server = Gunicorn(
            url, workers=args.workers, config=config, extra_env={"CART_TTL_SECONDS": SWARM_CART_TTL_SECONDS}
        ).start()
        log(f"gunicorn on {server.base}: {server.describe()}")
    base = args.host or server.base
    # Our own server runs with the bench secret; a running `make run` stack with the demo secret of .env.
    secret = BENCH_SECRET if server else os.environ.get("PAYMENT_WEBHOOK_SECRET", demo.DEMO_WEBHOOK_SECRET)
    results = []
    try:

        def flash_sale(name, users, run_time):
            """``users`` buyers released together for one unit: exactly one sale, the rest 409."""
            result = run_locust(
                name=name,
                base=base,
                url=url,
                secret=secret,
                users=users,
                classes=["FlashSaleBuyer"],
                run_time=run_time,
                tokens_file=tokens_file,
                burst=users,
                since_order_id=flash_sale_setup(url, 1),
            )
            result["expect"] = f"exactly 1 created, {users - 1} conflicts"
            if result.get("created") != 1:
                result.setdefault("violations", []).append(f"expected exactly 1 sale, got {result.get('created')}")
            return result

        if wanted("flash-100"):
            results.append(flash_sale("flash-100", 100, "120s"))
        if not naive and wanted("opening"):
            results.append(opening(base=base, url=url, secret=secret, tokens_file=tokens_file))
        if not naive and wanted("mixed"):
            since = flash_sale_setup(url, 1)
            r = run_locust(
                name="mixed",
                base=base,
                url=url,
                secret=secret,
                users=40,
                classes=["Shopper", "CartShopper", "WebhookReplayer"],
                run_time=f"{args.mixed_seconds}s",
                tokens_file=tokens_file,
                since_order_id=since,
            )
            r["expect"] = "no failure, replays are duplicates"
            results.append(r)
        if wanted("ticket-1000"):
            results.append(flash_sale("ticket-1000", 1000, "180s"))
    finally:
        if server:
            logged = server.errors_in_log()
            server.stop()
            log("gunicorn stopped")
            if logged:
                print(f"gunicorn logged {len(logged)} errors, e.g. {logged[0]}")

    print(
        "\n=== make loadtest summary" + (" (NAIVE read-check-write reservation, TEST ONLY)" if naive else "") + " ==="
    )
    print(f"{'profile':<12} {'requests':>8} {'201':>5} {'409':>5} {'5xx':>4} {'fail':>4} {'p50':>6} {'p99':>6}  result")
    failed = False
    for r in results:
        bad = r.get("violations") or r["exit_code"] != 0
        failed |= bool(bad)
        created = (
            r.get("created") if r["name"] != "mixed" else r.get("counts", {}).get("checkout 102-108", {}).get("201")
        )
        conflicts = (
            r.get("conflicts")
            if r["name"] != "mixed"
            else r.get("counts", {}).get("checkout 102-108", {}).get("409", 0)
        )
        print(
            f"{r['name']:<12} {r.get('requests', 0):>8} {created or 0:>5} {conflicts or 0:>5} {r.get('server_errors', 0):>4} "
            f"{r.get('failures', 0):>4} {r.get('p50_ms') or 0:>6.0f} {r.get('p99_ms') or 0:>6.0f}  "
            f"{'FAIL: ' + '; '.join(r.get('violations') or ['locust exit code ' + str(r['exit_code'])]) if bad else 'ok (' + r['expect'] + ')'}"
        )
    for r in results:
        if r["name"] == "opening" and r.get("opening_buyers"):
            print(
                f"opening second: {r.get('opening_second_requests')} checkouts sent, p50 {r.get('opening_second_p50_ms')} ms, "
                f"p99 {r.get('opening_second_p99_ms')} ms; {r.get('answered_within_1s')}/{r['opening_buyers']} buyers "
                f"answered within 1 s of the opening (last after {r.get('last_answer_after_opening_ms')} ms); "
                f"{r.get('opening_sent_early')} sent before sale_starts_at, {r.get('opening_sale_not_started')} of them "
                f"answered 409 sale_not_started; the buyers' countdowns spread over {r.get('opening_estimate_spread_ms')} ms "
                f"(median {r.get('opening_estimate_median_error_ms')} ms from the opening)"
            )
    (RESULTS / ("loadtest-naive.json" if naive else "loadtest.json")).write_text(json.dumps(results, indent=2))
    if failed:
        print("make loadtest: FAILED" + (" (as it must with the naive reservation)" if naive else ""))
        return 1
    print("make loadtest: all profiles passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
