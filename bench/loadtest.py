"""``make loadtest`` (``python -m bench loadtest``): Locust swarm checks against a gunicorn stack on 127.0.0.1, each
profile ending with locustfile.py's invariant checks (``audit_inventory``, no oversell, no 5xx):

- flash-100: 100 buyers released together at one unit of product 101: exactly 1 sale, 99 conflicts.
- opening: a sale window's opening (docs/sale-windows.md): buyers count down and fire at the opening; exactly the
  stock sold at the sale price, none before the window opens.
- mixed: shoppers (browse, buy, pay by signed webhook, cancel), cart shoppers (some after their cart expired: 410)
  and webhook replayers for a bounded time: no failure, every replay a duplicate, no cart checked out twice.
- ticket-1000: the seed's ticket case, 1000 buyers at one unit: exactly one sale.
- queue: the waiting room (docs/queue.md), one crowd at one opening without a queue (``queue-none``), then with one
  (a sweeper advancing admissions): each sells exactly the stock; queued, every buyer ends bought or sold out
  (``make loadtest-queue`` runs it alone). The crowd without a queue is a demonstration of overload: it passes when
  it sells exactly the stock, every 5xx is an honest 503 with Retry-After, and no request goes unanswered (zero
  client time-outs); its latencies, the 503s' among them, are reported, not judged.

Every profile goes through the front production uses: HAProxy (devtools/haproxy.py) in front of gunicorn, one
request per worker thread, the rest queued at most ``timeout queue`` (deploy.haproxy.render.QUEUE_TIMEOUT_MS) and then
answered 503 + Retry-After + ``X-Shed-By: front`` (docs/runbooks/overload.md#a-fast-503-never-a-time-out). The
buyers obey Retry-After (locustfile.py); the summary tells the front's 503s from the application's. ``--front none``
serves gunicorn directly, the shape without shedding (requests wait in the kernel's accept backlog instead).

``--naive`` serves the same stack with bench/naive_gunicorn.conf.py, a read-check-write reservation (never used by
the product), on its own throwaway database: the run must then FAIL with an oversell. Each run uses a fresh
database (skincare_loadtest) on the embedded PostgreSQL or the server DATABASE_URL points at; ``--host URL``
targets an already running stack instead. Each profile's details go to bench-results/loadtest.json. Locust shares
the cores with the service, so its latencies include its own queueing: beside them each profile reports the
service's own (``server_ms``, from the access lines gunicorn wrote during the run, queue profile), the load
generator's CPU (``client_cpu_seconds``) and whether Locust warned that its one core was saturated
(``client_saturated``), in which case its latencies say more about the client than about the service.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from config.environment import web_threads
from devtools.haproxy import HAProxy
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
# What Locust logs when its own process is CPU-bound (then the client, not the service, sets the latencies).
CLIENT_SATURATED = "CPU usage above 90%"


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
    server_log: Path | None = None,
    front_log: Path | None = None,
) -> dict[str, Any]:
    summary_path = RESULTS / f"loadtest-{name}.json"
    log_offset = server_log.stat().st_size if server_log is not None and server_log.exists() else 0
    front_offset = front_log.stat().st_size if front_log is not None and front_log.exists() else 0
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
    started, client_before = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    elapsed, client_after = time.monotonic() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    client_cpu = sum(getattr(client_after, f) - getattr(client_before, f) for f in ("ru_utime", "ru_stime"))
    out = "\n".join(without_runtime_dir_warning(proc.stdout + proc.stderr))
    (RESULTS / f"loadtest-{name}.log").write_text(out)
    print(out, flush=True)
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {"violations": ["no summary written"]}
    summary.update({"name": name, "exit_code": proc.returncode, "seconds": round(elapsed, 1)})
    # The load generator's own CPU (Locust is one gevent process: one core at most), over the whole run including
    # the countdown, and whether Locust itself warned that its CPU was above 90% at some moment: then its latencies
    # include its own queueing, not only the service's.
    summary["client_cpu_seconds"] = round(client_cpu, 1)
    summary["client_cpu_pct_of_one_core_mean"] = round(100 * client_cpu / elapsed, 1) if elapsed else None
    summary["client_saturated"] = CLIENT_SATURATED in out
    if server_log is not None:
        summary["server_ms"] = server_latencies(server_log, log_offset)
    if front_log is not None:
        summary["front_ms"] = front_latencies(front_log, front_offset)
    if summary["client_saturated"]:
        log(
            f"profile {name}: the load generator saturated its core (Locust: {CLIENT_SATURATED!r}); its latencies "
            "include its own queueing"
        )
    return summary


def _request_kind(method: str, path: str) -> str:
    if path.startswith("/v1/queue/passes/"):
        return "poll"
    if path.endswith("/queue"):
        return "join" if method == "POST" else "poll (no signed pass)"
    if path == "/v1/checkout":
        return "checkout"
    return "other"


def server_latencies(server_log: Path, offset: int) -> dict[str, dict[str, Any]]:
    """The service's own latencies (the access lines' ``duration_ms``: from the request entering Django to its
    answer, without the time it waited for a worker) of the lines written after ``offset``, per kind of request:
    count, p50, p99, and the 503s."""
    kinds: dict[str, list[float]] = {}
    shed: dict[str, int] = {}
    busy: list[float] = []  # the application's own 503s (a lock not had in time), whatever the kind
    with open(server_log, encoding="utf-8", errors="replace") as lines:
        lines.seek(offset)
        for line in lines:
            if not line.startswith("{") or '"duration_ms"' not in line:
                continue
            try:
                entry = json.loads(line)
                kind = _request_kind(entry["method"], entry["path"])
                kinds.setdefault(kind, []).append(float(entry["duration_ms"]))
                if entry["status"] == 503:
                    shed[kind] = shed.get(kind, 0) + 1
                    busy.append(float(entry["duration_ms"]))
            except (ValueError, KeyError, TypeError):
                continue

    latencies = {
        kind: {"n": len(v), "p50_ms": pct(v, 0.5), "p99_ms": pct(v, 0.99), "503": shed.get(kind, 0)}
        for kind, v in sorted(kinds.items())
    }
    if busy:
        latencies["503 (application)"] = {"n": len(busy), "p50_ms": pct(busy, 0.5), "p99_ms": pct(busy, 0.99), "503": 0}
    return latencies


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def front_latencies(front_log: Path, offset: int) -> dict[str, dict[str, Any]]:
    """The front's own view of the lines HAProxy wrote after ``offset`` (deploy.haproxy.render.LOG_FORMAT): every request's
    time queued at the front (``tw``), and the 503s the front answered itself when the queue timeout ran out
    (termination state ``sQ``): how many, and their time in the front (``ta``, request to answer)."""
    queued: list[float] = []
    shed: list[float] = []
    with open(front_log, encoding="utf-8", errors="replace") as lines:
        lines.seek(offset)
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # HAProxy's own notices
            if not isinstance(entry, dict) or "tsc" not in entry:
                continue
            if entry["tsc"].startswith("sQ"):
                shed.append(float(entry["ta"]))
            elif entry["tw"] >= 0:
                queued.append(float(entry["tw"]))
    result: dict[str, dict[str, Any]] = {}
    if queued:
        result["queued at the front"] = {"n": len(queued), "p50_ms": pct(queued, 0.5), "p99_ms": pct(queued, 0.99)}
    if shed:
        result["503 (front)"] = {"n": len(shed), "p50_ms": pct(shed, 0.5), "p99_ms": pct(shed, 0.99)}
    return result


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


QUEUE_CROWD, QUEUE_STOCK, QUEUE_PACE, QUEUE_STARTS_IN = 5000, 500, 50, 75

# Backends inside a checkout transaction: their current (or, idle in transaction, last) statement is one of the
# checkout's (QUOTES_SQL takes the customer lock, the admission check, ORDER_SQL, the stock UPDATE or claim).
CHECKOUTS_IN_DB_SQL = """
SELECT count(*) FROM pg_stat_activity
 WHERE datname = %s AND pid <> pg_backend_pid() AND xact_start IS NOT NULL
   AND (query LIKE '%%customer_locked%%' OR query LIKE '%%WITH queued AS%%' OR query LIKE '%%WITH new_order AS%%'
        OR query LIKE '%%UPDATE stock_buckets%%' OR query LIKE '%%WITH free AS%%')
"""


class CheckoutsInDatabase:
    """Samples, every 10 ms on its own connection, how many checkout transactions are inside the database."""

    def __init__(self, url: str) -> None:
        import threading
        from urllib.parse import urlparse

        self.url, self.dbname = url, urlparse(url).path.lstrip("/")
        self.peak, self.samples = 0, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, name="checkouts-in-db", daemon=True)

    def run(self) -> None:
        import psycopg

        from devtools.processes import admin_conninfo

        with psycopg.connect(admin_conninfo(self.url), autocommit=True) as conn:
            while not self.stop.wait(0.01):
                (n,) = conn.execute(CHECKOUTS_IN_DB_SQL, [self.dbname]).fetchone()
                self.peak, self.samples = max(self.peak, n), self.samples + 1

    def __enter__(self) -> "CheckoutsInDatabase":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)


def sale_opens_at(url: str) -> float:
    """Product 101's sale_starts_at as Unix seconds (the database's clock is this machine's)."""
    import psycopg

    with psycopg.connect(url.replace("postgres://", "postgresql://", 1)) as conn:
        (epoch,) = conn.execute(
            "SELECT extract(epoch FROM sale_starts_at)::float FROM products WHERE id = 101"
        ).fetchone()
    return float(epoch)


def queue_profile(
    *,
    base: str,
    url: str,
    secret: str,
    tokens_file: Path,
    crowd_size: int = QUEUE_CROWD,
    stock: int = QUEUE_STOCK,
    pace: int = QUEUE_PACE,
    server_log: Path | None = None,
    front_log: Path | None = None,
    with_queue: bool = True,
) -> list[dict[str, Any]]:
    """The same crowd at one opening without a queue, then (``with_queue``) with one (see the module docstring)."""
    window = ("--duration", "600", "--max-per-customer", "1")
    since = flash_sale_setup(url, stock, "--starts-in", str(QUEUE_STARTS_IN), *window)
    with CheckoutsInDatabase(url) as crowd_sampler:
        crowd = run_locust(
            name="queue-none",
            base=base,
            url=url,
            secret=secret,
            users=crowd_size,
            classes=["OpeningBuyer"],
            run_time=f"{QUEUE_STARTS_IN + 240}s",
            tokens_file=tokens_file,
            stock=stock,
            since_order_id=since,
            extra_env={"OPENING_BUYERS": str(crowd_size)},
            server_log=server_log,
            front_log=front_log,
        )
    crowd["checkouts_in_db_peak"] = crowd_sampler.peak
    crowd["expect"] = f"exactly {stock} created, honest 503s only, no time-out"
    # The crowd without a queue overloads the service on purpose: a 503 with Retry-After (the front's or the
    # application's) is an honest answer the buyers obey, so Locust's failures are only the other 5xx and the requests
    # never answered (time-outs, status 0), and each is a violation (locustfile.py); its latencies are reported.
    if crowd.get("no_answer"):
        crowd.setdefault("violations", []).append(f"{crowd['no_answer']} requests never answered (client time-outs)")
    if crowd.get("created") != stock:
        crowd.setdefault("violations", []).append(f"expected {stock} sales, got {crowd.get('created')}")
    if not with_queue:
        return [crowd]

    since = flash_sale_setup(
        url,
        stock,
        *("--starts-in", str(QUEUE_STARTS_IN), *window, "--queue", "--admit-per-second", str(pace)),
    )
    opens_at = sale_opens_at(url)
    sweeper = subprocess.Popen(
        [sys.executable, "manage.py", "expire_reservations", "--loop", "--interval", "0.5", "--verbosity", "0"],
        cwd=ROOT,
        env=django_env(url),
    )
    try:
        with CheckoutsInDatabase(url) as queue_sampler:
            queued = run_locust(
                name="queue",
                base=base,
                url=url,
                secret=secret,
                users=crowd_size,
                classes=["QueueBuyer"],
                run_time=f"{QUEUE_STARTS_IN + 300}s",
                tokens_file=tokens_file,
                stock=stock,
                since_order_id=since,
                extra_env={
                    "QUEUE_BUYERS": str(crowd_size),
                    "QUEUE_OPENS_AT_EPOCH": repr(opens_at),
                    # Buyers arrive over the countdown (a queue opens QUEUE_OPENS_BEFORE_SECONDS before the sale),
                    # all of them before the opening.
                    "QUEUE_JOIN_SPREAD_SECONDS": str(max(1, opens_at - time.time() - 15)),
                },
                server_log=server_log,
                front_log=front_log,
            )
    finally:
        sweeper.terminate()
        sweeper.wait(30)
    queued["checkouts_in_db_peak"] = queue_sampler.peak
    queued["expect"] = f"exactly {stock} created through the queue, everyone else sold_out"
    if queued.get("created") != stock:
        queued.setdefault("violations", []).append(f"expected {stock} sales, got {queued.get('created')}")
    return [crowd, queued]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench loadtest")
    parser.add_argument("--naive", action="store_true", help="TEST ONLY: serve with the read-check-write reservation")
    parser.add_argument("--host", help="an already running stack (http://127.0.0.1:PORT) instead of starting one")
    parser.add_argument("--mixed-seconds", type=int, default=30)
    parser.add_argument(
        "--workers", type=int, default=int(os.environ.get("WEB_CONCURRENCY", (os.cpu_count() or 2) + 1))
    )
    parser.add_argument(
        "--only",
        action="append",
        metavar="PROFILE",
        help="run only these profiles (repeatable): flash-100, opening, mixed, ticket-1000, queue, queue-none",
    )
    parser.add_argument(
        "--front",
        choices=("haproxy", "none"),
        default="haproxy",
        help="haproxy: every request through the front that sheds (default); none: gunicorn directly",
    )
    parser.add_argument("--queue-crowd", type=int, default=QUEUE_CROWD, help=f"queue profile: buyers ({QUEUE_CROWD})")
    parser.add_argument("--queue-stock", type=int, default=QUEUE_STOCK, help=f"queue profile: units ({QUEUE_STOCK})")
    parser.add_argument(
        "--queue-pace", type=int, default=QUEUE_PACE, help=f"queue profile: admissions/s ({QUEUE_PACE})"
    )
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
    crowds = wanted("queue") or wanted("queue-none")
    buyers = max(1000, args.queue_crowd) if crowds and not naive else 1000
    log(f"issuing {buyers} customer tokens (manage.py issue_token, one per buyer)")
    ctl(url, "tokens", str(buyers), "loadtest-buyer", str(tokens_file))

    server, front = None, None
    if not args.host:
        config = "bench/naive_gunicorn.conf.py" if naive else None
        server = Gunicorn(
            url, workers=args.workers, config=config, extra_env={"CART_TTL_SECONDS": SWARM_CART_TTL_SECONDS}
        ).start()
        log(f"gunicorn on {server.base}: {server.describe()}")
        if args.front == "haproxy":
            # One request per worker thread, the rest queued at the front at most its queue timeout; room for every
            # buyer's connection at once (the largest crowd, and the 1,000 of ticket-1000).
            front = HAProxy(
                {"web0": server.port},
                maxconn=args.workers * web_threads(),
                max_clients=max(1000, args.queue_crowd) + 1000,
                log_path=RESULTS / "haproxy.log",
            ).start()
            log(f"haproxy on {front.base} -> gunicorn, queue timeout {front.queue_timeout_ms} ms, then 503")
    base = args.host or (front.base if front else server.base)
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
        if not naive and crowds:
            results.extend(
                queue_profile(
                    base=base,
                    url=url,
                    secret=secret,
                    tokens_file=tokens_file,
                    crowd_size=args.queue_crowd,
                    stock=args.queue_stock,
                    pace=args.queue_pace,
                    server_log=server.log_path if server else None,
                    front_log=front.log_path if front else None,
                    with_queue=wanted("queue"),
                )
            )
    finally:
        if front:
            front.stop()
            log("haproxy stopped")
        if server:
            logged = server.errors_in_log()
            server.stop()
            log("gunicorn stopped")
            if logged:
                print(f"gunicorn logged {len(logged)} errors, e.g. {logged[0]}")

    print(
        "\n=== make loadtest summary" + (" (NAIVE read-check-write reservation, TEST ONLY)" if naive else "") + " ==="
    )
    # Locust shares the cores with the service: its latencies include its own queueing, so they stay in the JSON.
    # 503 front / 503 app: honest 503s with Retry-After (the front's queue timeout; the application's lock timeout),
    # obeyed by the buyers; gave up: buyers who still had a 503 after their last retry; no answer: client time-outs;
    # 5xx: every other one.
    print(
        f"{'profile':<12} {'requests':>8} {'201':>5} {'409':>5} {'503 front':>9} {'503 app':>7} {'gave up':>7} "
        f"{'no answer':>9} {'5xx':>4} {'fail':>4}  result"
    )
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
            f"{r['name']:<12} {r.get('requests', 0):>8} {created or 0:>5} {conflicts or 0:>5} "
            f"{r.get('shed_front', 0):>9} {r.get('shed_app', 0):>7} {r.get('gave_up', 0):>7} "
            f"{r.get('no_answer', 0):>9} {r.get('server_errors', 0):>4} {r.get('failures', 0):>4}  "
            f"{'FAIL: ' + '; '.join(r.get('violations') or ['locust exit code ' + str(r['exit_code'])]) if bad else 'ok (' + r['expect'] + ')'}"
        )
    for r in results:  # beside the client's latencies: the service's own, and whether the client was the limit
        print(
            f"  {r['name']}: at the client: p50 {r.get('p50_ms')} / p99 {r.get('p99_ms')} ms; 503s from the front "
            f"p50 {r.get('shed_front_p50_ms')} / p99 {r.get('shed_front_p99_ms')} ms, from the application "
            f"p50 {r.get('shed_app_p50_ms')} / p99 {r.get('shed_app_p99_ms')} ms"
        )
        if r.get("front_ms"):
            inside = ", ".join(
                f"{k} p50 {v['p50_ms']} / p99 {v['p99_ms']} ms (n {v['n']})" for k, v in r["front_ms"].items()
            )
            print(f"  {r['name']}: in the front: {inside}")
        if "server_ms" in r:
            inside = ", ".join(
                f"{k} p50 {v['p50_ms']} / p99 {v['p99_ms']} ms (n {v['n']})" for k, v in r["server_ms"].items()
            )
            print(f"  {r['name']}: in the service: {inside}")
        print(
            f"  {r['name']}: load generator CPU {r.get('client_cpu_seconds')} s (mean "
            f"{r.get('client_cpu_pct_of_one_core_mean')}% of its one core)"
            + (" - SATURATED: its latencies include its own queueing" if r.get("client_saturated") else "")
        )
    report = RESULTS / ("loadtest-naive.json" if naive else "loadtest.json")
    report.write_text(json.dumps(results, indent=2))
    log(f"each profile's details (the opening second, the queue's admissions and polls): {report.relative_to(ROOT)}")
    if failed:
        print("make loadtest: FAILED" + (" (as it must with the naive reservation)" if naive else ""))
        return 1
    print("make loadtest: all profiles passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
