"""``make scaleout``: the production shape on one machine, end to end.

PostgreSQL (embedded, or the server DATABASE_URL names) → one PgBouncer in transaction mode → two gunicorn instances
on two ports (DB_PGBOUNCER=true) + two ``expire_reservations --loop`` sweepers with their own metrics ports, and
HAProxy in front of the instances (:mod:`devtools.haproxy`: health checks on ``/readyz``, at most one request per
worker thread, a bounded queue that answers 503 with Retry-After). Every request of the load goes through HAProxy:

1. flash sale: FLASH_STOCK units of product 101, FLASH_BUYERS buyers released together by a barrier; then every
   winner pays by signed webhook;
2. mixed traffic for --seconds: checkouts of products 102-108, then pay, cancel or abandon (abandoned carts expire
   after the short RESERVATION_TTL_SECONDS and are swept by the two sweepers);
3. wait (deadline) until no order is pending, i.e. every abandoned cart was swept.

Passes when: zero 5xx, product 101 sold exactly its stock (paid units == stock, nothing left), ``audit_inventory``
clean, and the sweepers expired every abandoned cart. Every process it started is stopped by its pid.
"""

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from config.environment import web_threads
from devtools.haproxy import HAProxy
from devtools.pgbouncer import PgBouncer
from devtools.processes import (
    RESULTS,
    Stack,
    ctl,
    flash_sale_setup,
    http_call,
    log,
    manage,
    payment_webhook,
    query,
    recreate_database,
)
from devtools.processes import server_url as db_url

DBNAME = "skincare_scaleout"
FLASH_PRODUCT = 101
MIXED_PRODUCTS = range(102, 109)


def recreate(url: str) -> None:
    """A fresh ``skincare_scaleout``: dropped, created, migrated, the demo data loaded."""
    recreate_database(url)


class Client:
    """HTTP calls with per-call latency and status bookkeeping (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.statuses: Counter[tuple[str, int]] = Counter()
        self.latencies: dict[str, list[float]] = {}

    def call(
        self, kind: str, base: str, path: str, *, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        started = time.perf_counter()
        status, payload, _headers = http_call(base, path, body=body, headers=headers or {}, timeout=60)
        elapsed = time.perf_counter() - started
        with self.lock:
            self.statuses[(kind, status)] += 1
            self.latencies.setdefault(kind, []).append(elapsed)
        try:
            return status, json.loads(payload)
        except ValueError:
            return status, {"raw": payload[:200].decode(errors="replace")}

    def checkout(self, base: str, token: str, items: list[dict[str, int]]) -> tuple[int, Any]:
        body = json.dumps({"items": items}).encode()
        return self.call("checkout", base, "/v1/checkout", body=body, headers={"Authorization": f"Bearer {token}"})

    def pay(self, base: str, order: dict[str, Any]) -> tuple[int, Any]:
        order_id = order["order_id"]
        body, headers = payment_webhook(order, event_id=f"evt-scaleout-{order_id}", reference=f"psp-{order_id}")
        return self.call("webhook", base, "/v1/payments/webhook", body=body, headers=headers)

    def cancel(self, base: str, token: str, order_id: int) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token}"}
        return self.call("cancel", base, f"/v1/orders/{order_id}/cancel", body=b"", headers=headers)


@dataclass
class Run:
    """What one rehearsal saw: filled in step by step, judged and printed at the end."""

    args: argparse.Namespace
    direct: str = ""  # the database, not through PgBouncer (set-up and the verdict's reads)
    tokens: list[str] = field(default_factory=list)
    since: int = 0  # the highest order id before the flash sale
    client: Client = field(default_factory=Client)
    won: list[dict[str, Any]] = field(default_factory=list)
    flash_statuses: Counter[int] = field(default_factory=Counter)
    flash_seconds: float = 0.0
    actions: Counter[str] = field(default_factory=Counter)
    mixed_seconds: float = 0.0
    sweep_lag: float = 0.0
    sweeper_metrics: list[dict[str, float]] = field(default_factory=list)
    instance_metrics: list[dict[str, float]] = field(default_factory=list)
    logged: list[str] = field(default_factory=list)
    per_server: dict[str, int] = field(default_factory=dict)  # requests HAProxy sent to each instance
    failures: list[str] = field(default_factory=list)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m devtools.scaleout")
    parser.add_argument("--seconds", type=int, default=20, help="mixed traffic duration")
    parser.add_argument("--flash-stock", type=int, default=5)
    parser.add_argument("--flash-buyers", type=int, default=200)
    parser.add_argument("--shoppers", type=int, default=16, help="concurrent mixed-traffic clients")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers per instance")
    parser.add_argument("--ttl", type=int, default=6, help="RESERVATION_TTL_SECONDS (short, so carts expire)")
    parser.add_argument("--queue-timeout-ms", type=int, default=5000, help="HAProxy's queue timeout (then 503)")
    return parser.parse_args(argv)


def prepare_database(run: Run) -> None:
    """A fresh database with the demo data, a token per buyer and the flash sale's product."""
    run.direct = db_url(DBNAME)
    log(f"fresh database {run.direct.split('?')[0]}")
    recreate(run.direct)
    tokens_file = RESULTS / "scaleout-tokens.json"
    buyers = max(run.args.flash_buyers, run.args.shoppers)
    ctl(run.direct, "tokens", str(buyers), "scaleout-buyer", str(tokens_file))
    run.tokens = json.loads(tokens_file.read_text())
    run.since = flash_sale_setup(run.direct, run.args.flash_stock)


def start_pgbouncer(run: Run) -> PgBouncer:
    bouncer = PgBouncer.for_url(run.direct, default_pool_size=20).start()
    log(f"pgbouncer (transaction mode) on 127.0.0.1:{bouncer.port}, pid {bouncer.proc.pid}")  # type: ignore[union-attr]
    return bouncer


def start_stack(stack: Stack) -> None:
    """The two instances and the two sweepers, all through PgBouncer."""

    def started(instance: Any) -> None:
        log(f"gunicorn on {instance.base} (pid {instance.proc.pid}): {instance.describe()}, through pgbouncer")

    stack.start_instances(started)
    stack.start_sweepers()
    for n, (proc, _out, port) in enumerate(stack.sweepers.running):
        log(f"sweeper {n} pid {proc.pid}, metrics on 127.0.0.1:{port}")


def flash_sale(run: Run, bases: list[str]) -> None:
    """Everyone at once, alternating instances; then every winner pays, through the other instance."""
    args, client = run.args, run.client
    barrier = threading.Barrier(args.flash_buyers)

    def flash(i: int) -> None:
        barrier.wait(timeout=60)
        status, body = client.checkout(bases[i % 2], run.tokens[i], [{"product_id": FLASH_PRODUCT, "qty": 1}])
        with client.lock:
            run.flash_statuses[status] += 1
            if status == 201:
                run.won.append(body)

    log(f"flash sale: {args.flash_buyers} buyers for {args.flash_stock} units of product 101, both instances")
    t0 = time.monotonic()
    threads = [threading.Thread(target=flash, args=(i,)) for i in range(args.flash_buyers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    run.flash_seconds = time.monotonic() - t0
    for n, order in enumerate(run.won):
        client.pay(bases[(n + 1) % 2], order)


def mixed_traffic(run: Run, bases: list[str]) -> None:
    """Checkout, then pay / cancel / abandon, spread over both instances, for --seconds."""
    args, client = run.args, run.client
    stop_at = time.monotonic() + args.seconds

    def shopper(i: int) -> None:
        rng = random.Random(i)
        n = 0
        while time.monotonic() < stop_at:
            n += 1
            base = bases[(i + n) % 2]
            items = [
                {"product_id": pid, "qty": rng.randint(1, 2)} for pid in rng.sample(MIXED_PRODUCTS, rng.randint(1, 2))
            ]
            status, body = client.checkout(base, run.tokens[i], items)
            if status != 201:
                continue
            action = rng.choices(["pay", "cancel", "abandon"], weights=[5, 2, 3])[0]
            with client.lock:
                run.actions[action] += 1
            other = bases[(i + n + 1) % 2]
            if action == "pay":
                client.pay(other, body)
            elif action == "cancel":
                client.cancel(other, run.tokens[i], int(body["order_id"]))

    log(f"mixed traffic: {args.shoppers} shoppers for {args.seconds}s (TTL {args.ttl}s, 2 sweepers every 1s)")
    t1 = time.monotonic()
    threads = [threading.Thread(target=shopper, args=(i,)) for i in range(args.shoppers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    run.mixed_seconds = time.monotonic() - t1


def wait_for_sweeps(run: Run) -> None:
    """Every abandoned cart must be swept (poll a readiness condition with a deadline)."""
    log("waiting for the sweepers to expire every abandoned cart")
    traffic_stopped = time.monotonic()
    deadline = traffic_stopped + run.args.ttl + 60
    while True:
        pending = query(run.direct, "SELECT count(*) FROM orders WHERE status = 'pending_payment'")[0][0]
        if pending == 0:
            break
        if time.monotonic() > deadline:
            run.failures.append(f"{pending} orders still pending after the deadline: the sweepers fell behind")
            break
        time.sleep(0.5)
    run.sweep_lag = time.monotonic() - traffic_stopped


def start_balancer(run: Run, stack: Stack) -> HAProxy:
    """HAProxy in front of the instances: one request per worker thread, the rest queued up to --queue-timeout-ms."""
    servers = {f"web{n}": instance.port for n, instance in enumerate(stack.instances)}
    maxconn = run.args.workers * web_threads()
    lb = HAProxy(servers, maxconn=maxconn, queue_timeout_ms=run.args.queue_timeout_ms).start()
    log(f"haproxy on {lb.base} (pid {lb.proc.pid if lb.proc else '?'}): {', '.join(servers)} UP, /readyz checked")
    return lb


def stop(stack: Stack | None, bouncer: PgBouncer | None, lb: HAProxy | None, run: Run) -> None:
    if lb is not None:
        run.per_server = {name: int(row["stot"]) for name, row in lb.stat().items()}
        lb.stop()
    if stack is not None:
        run.logged = stack.stop(expected=('"status_code": 503',))
    if bouncer is not None:
        bouncer.stop()
    log("stopped: haproxy, 2 sweepers, 2 gunicorn instances, pgbouncer (each by its pid)")


@dataclass
class Verdict:
    five_xx: int
    paid_units: int
    available: int
    reserved: int
    audit_clean: bool
    expired_db: int


def judge(run: Run) -> Verdict:
    """Zero 5xx, no logged errors, the flash product sold exactly its stock, a clean audit, sweeper metrics that
    agree with the database. Each miss is added to ``run.failures``."""
    args, failures = run.args, run.failures
    five_xx = sum(count for (_kind, status), count in run.client.statuses.items() if status >= 500)
    if five_xx:
        failures.append(f"{five_xx} responses were 5xx")
    if run.logged:
        failures.append(f"gunicorn logged errors, e.g. {run.logged[0]}")
    [(paid_units, available, reserved)] = query(
        run.direct,
        f"""SELECT COALESCE((SELECT SUM(l.qty) FROM order_lines l JOIN orders o ON o.id = l.order_id
                   WHERE l.product_id = {FLASH_PRODUCT} AND o.id > {run.since} AND o.status = 'paid'), 0),
                  available_stock, reserved_stock FROM inventories WHERE product_id = {FLASH_PRODUCT}""",
    )
    if (len(run.won), paid_units, available, reserved) != (args.flash_stock, args.flash_stock, 0, 0):
        failures.append(
            f"flash sale: {len(run.won)} created, {paid_units} paid units, stock left {available}/{reserved} "
            f"(expected {args.flash_stock} sold, 0 left)"
        )
    audit = manage(run.direct, "audit_inventory", check=False, quiet=True)
    if audit.returncode != 0:
        failures.append("audit_inventory: " + (audit.stdout + audit.stderr).strip()[-500:])
    expired_total = sum(m.get("skincare_sweeper_expired_reservations_total", 0) for m in run.sweeper_metrics)
    [(expired_db,)] = query(run.direct, "SELECT count(*) FROM inventory_reservations WHERE status = 'expired'")
    if expired_total != expired_db:
        failures.append(f"sweeper metrics say {expired_total:.0f} expired, the database {expired_db}")
    return Verdict(five_xx, paid_units, available, reserved, audit.returncode == 0, expired_db)


def report(run: Run, verdict: Verdict) -> int:
    args, client = run.args, run.client

    def pct(kind: str, q: float) -> float:
        values = sorted(client.latencies.get(kind, [0.0]))
        return 1000 * values[min(len(values) - 1, int(q * len(values)))]

    requests = sum(client.statuses.values())
    print("\n=== make scaleout ===")
    print(
        f"stack: haproxy (queue timeout {args.queue_timeout_ms} ms) -> 2 gunicorn x {args.workers} workers "
        "-> pgbouncer (transaction, pool 20); 2 sweepers"
    )
    print(
        f"flash sale: {args.flash_buyers} buyers, stock {args.flash_stock}: {dict(sorted(run.flash_statuses.items()))} in {run.flash_seconds:.2f}s; paid units {verdict.paid_units}, left {verdict.available}/{verdict.reserved}"
    )
    print(f"mixed: {run.mixed_seconds:.1f}s, checkouts then {dict(run.actions)}")
    print(
        f"requests: {requests} ({requests / max(run.mixed_seconds + run.flash_seconds, 1e-9):.0f}/s), 5xx: {verdict.five_xx}"
    )
    for kind in sorted(client.latencies):
        statuses = {s: c for (k, s), c in sorted(client.statuses.items()) if k == kind}
        print(
            f"  {kind:<9} {statuses}  p50 {pct(kind, 0.5):.0f} ms  p99 {pct(kind, 0.99):.0f} ms  mean {1000 * statistics.fmean(client.latencies[kind]):.0f} ms"
        )
    print("per instance (haproxy): " + ", ".join(f"{name}: {n} requests" for name, n in sorted(run.per_server.items())))
    for n, m in enumerate(run.instance_metrics):
        created = m.get('skincare_checkout_requests_total{outcome="created"}', 0)
        conflicts = m.get('skincare_checkout_requests_total{outcome="stock_conflict"}', 0)
        retries = sum(v for k, v in m.items() if k.startswith("skincare_db_transaction_retries_total"))
        busy = sum(v for k, v in m.items() if k.startswith("skincare_db_busy_total"))
        print(
            f"  instance {n} /metrics: created {created:.0f}, stock_conflict {conflicts:.0f}, retries {retries:.0f}, busy {busy:.0f}"
        )
    for n, m in enumerate(run.sweeper_metrics):
        print(
            f"  sweeper {n} /metrics: expired reservations {m.get('skincare_sweeper_expired_reservations_total', 0):.0f}, "
            f"batches {m.get('skincare_sweeper_batches_total', 0):.0f}, "
            f"oldest overdue at last sweep {m.get('skincare_sweeper_oldest_overdue_seconds', 0):.1f}s"
        )
    print(
        f"sweep: every abandoned cart expired {run.sweep_lag:.1f}s after the traffic stopped (TTL {args.ttl}s); "
        f"{verdict.expired_db} reservations expired in total"
    )
    print(f"audit_inventory: {'clean' if verdict.audit_clean else 'VIOLATIONS'}")
    (RESULTS / "scaleout.json").write_text(
        json.dumps(
            {"statuses": {f"{k}:{s}": c for (k, s), c in client.statuses.items()}, "failures": run.failures},
            indent=2,
        )
    )
    if run.failures:
        print("make scaleout: FAILED\n  " + "\n  ".join(run.failures))
        return 1
    print("make scaleout: passed")
    return 0


def main(argv: list[str] | None = None) -> int:
    run = Run(parse_args(argv))
    RESULTS.mkdir(exist_ok=True)
    prepare_database(run)
    bouncer = stack = lb = None
    try:
        bouncer = start_pgbouncer(run)
        env = {"DB_PGBOUNCER": "true", "RESERVATION_TTL_SECONDS": run.args.ttl, "ACCESS_LOG": "false"}
        stack = Stack(
            bouncer.url(DBNAME),
            name="scaleout",
            workers=run.args.workers,
            env=env,
            sweeper_env={"DB_PGBOUNCER": "true"},
        )
        start_stack(stack)
        lb = start_balancer(run, stack)
        flash_sale(run, [lb.base, lb.base])
        mixed_traffic(run, [lb.base, lb.base])
        wait_for_sweeps(run)
        run.sweeper_metrics = stack.sweepers.metrics()
        run.instance_metrics = stack.instance_metrics()
    finally:
        stop(stack, bouncer, lb, run)
    return report(run, judge(run))


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.exit(main())
