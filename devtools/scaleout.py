"""``make scaleout``: the production shape on one machine, end to end.

PostgreSQL (embedded, or the server DATABASE_URL names) → one PgBouncer in transaction mode → two gunicorn instances
on two ports (DB_PGBOUNCER=true) + two ``expire_reservations --loop`` sweepers with their own metrics ports, and a
load run spread over both instances:

1. flash sale: FLASH_STOCK units of product 101, FLASH_BUYERS buyers released together by a barrier, alternating
   between the instances; then every winner pays by signed webhook (sent to the *other* instance);
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
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from urllib.parse import urlparse, urlunparse

from devtools.pgbouncer import PgBouncer
from devtools.processes import (
    BENCH_SECRET,
    PY,
    RESULTS,
    ROOT,
    Gunicorn,
    ctl,
    django_env,
    flash_sale_setup,
    free_port,
    log,
    manage,
)
from devtools.processes import server_url as db_url
from payments import signing

DBNAME = "skincare_scaleout"


def recreate(url: str) -> None:
    import psycopg

    parts = urlparse(url)
    admin = urlunparse(parts._replace(path="/postgres", scheme="postgresql"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DBNAME}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{DBNAME}"')
    manage(url, "migrate", "--noinput", "-v0")
    manage(url, "load_demo_data")


class Client:
    """HTTP calls with per-call latency and status bookkeeping (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.statuses: Counter[tuple[str, int]] = Counter()
        self.latencies: dict[str, list[float]] = {}
        self.per_instance: Counter[str] = Counter()

    def call(
        self, kind: str, base: str, path: str, *, body: bytes | None = None, headers: dict[str, str] | None = None
    ):  # type: ignore[no-untyped-def]
        request = urllib.request.Request(base + path, data=body, method="POST" if body is not None else "GET")
        for key, value in {"Content-Type": "application/json", **(headers or {})}.items():
            request.add_header(key, value)
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                status, payload = response.status, response.read()
        except urllib.error.HTTPError as error:
            status, payload = error.code, error.read()
        elapsed = time.perf_counter() - started
        with self.lock:
            self.statuses[(kind, status)] += 1
            self.latencies.setdefault(kind, []).append(elapsed)
            self.per_instance[base] += 1
        try:
            return status, json.loads(payload)
        except ValueError:
            return status, {"raw": payload[:200].decode(errors="replace")}

    def checkout(self, base: str, token: str, items: list[dict[str, int]]):  # type: ignore[no-untyped-def]
        body = json.dumps({"items": items}).encode()
        return self.call("checkout", base, "/v1/checkout", body=body, headers={"Authorization": f"Bearer {token}"})

    def pay(self, base: str, order: dict[str, object]):  # type: ignore[no-untyped-def]
        event = {
            "event_id": f"evt-scaleout-{order['order_id']}",
            "type": "payment.succeeded",
            "order_id": order["order_id"],
            "amount": order["total"],
            "currency": order["currency"],
            "provider_reference": f"psp-{order['order_id']}",
        }
        body = json.dumps(event).encode()
        signature = signing.sign(body=body, secret=BENCH_SECRET)  # the gateway's X-Signature, as the webhook checks it
        return self.call("webhook", base, "/v1/payments/webhook", body=body, headers={"X-Signature": signature})

    def cancel(self, base: str, token: str, order_id: int):  # type: ignore[no-untyped-def]
        headers = {"Authorization": f"Bearer {token}"}
        return self.call("cancel", base, f"/v1/orders/{order_id}/cancel", body=b"", headers=headers)


def scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, number = line.rpartition(" ")
            samples[name] = float(number)
    return samples


def wait_for_metrics(ports: list[int], *, seconds: float = 30) -> None:
    """Until every sweeper's metrics endpoint on 127.0.0.1 answers (it is up once its worker has started)."""
    deadline = time.monotonic() + seconds
    for port in ports:
        while True:
            try:
                scrape(f"http://127.0.0.1:{port}/metrics")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("a sweeper's metrics endpoint never came up") from None
                time.sleep(0.2)  # polling with a deadline


def sql(url: str, query: str) -> list[tuple[object, ...]]:
    import psycopg

    with psycopg.connect(url.replace("postgres://", "postgresql://", 1)) as conn:
        return conn.execute(query).fetchall()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.scaleout")
    parser.add_argument("--seconds", type=int, default=20, help="mixed traffic duration")
    parser.add_argument("--flash-stock", type=int, default=5)
    parser.add_argument("--flash-buyers", type=int, default=200)
    parser.add_argument("--shoppers", type=int, default=16, help="concurrent mixed-traffic clients")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers per instance")
    parser.add_argument("--ttl", type=int, default=6, help="RESERVATION_TTL_SECONDS (short, so carts expire)")
    args = parser.parse_args(argv)
    RESULTS.mkdir(exist_ok=True)

    direct = db_url(DBNAME)
    log(f"fresh database {direct.split('?')[0]}")
    recreate(direct)
    tokens_file = RESULTS / "scaleout-tokens.json"
    buyers = max(args.flash_buyers, args.shoppers)
    ctl(direct, "tokens", str(buyers), "scaleout-buyer", str(tokens_file))
    tokens: list[str] = json.loads(tokens_file.read_text())
    since = flash_sale_setup(direct, args.flash_stock)

    started: list[object] = []
    bouncer = sweepers = None
    failures: list[str] = []
    client = Client()
    try:
        bouncer = PgBouncer.for_url(direct, default_pool_size=20).start()
        started.append(bouncer)
        pooled = bouncer.url(DBNAME)
        log(f"pgbouncer (transaction mode) on 127.0.0.1:{bouncer.port}, pid {bouncer.proc.pid}")  # type: ignore[union-attr]
        env = {"DB_PGBOUNCER": "true", "RESERVATION_TTL_SECONDS": args.ttl, "ACCESS_LOG": "false"}
        instances = [Gunicorn(pooled, workers=args.workers, extra_env=env) for _ in range(2)]
        for instance in instances:
            instance.start()
            started.append(instance)
            log(f"gunicorn on {instance.base} (pid {instance.proc.pid}): {instance.describe()}, through pgbouncer")
        sweeper_ports = [free_port(), free_port()]
        sweepers = []
        for n, port in enumerate(sweeper_ports):
            out = open(RESULTS / f"scaleout-sweeper-{n}.log", "w")  # noqa: SIM115 - closed below
            proc = subprocess.Popen(
                [
                    PY,
                    "manage.py",
                    "expire_reservations",
                    "--loop",
                    "--interval",
                    "1",
                    "--batch-size",
                    "20",
                    "--metrics-port",
                    str(port),
                ],
                cwd=ROOT,
                env=django_env(pooled, DB_PGBOUNCER="true", LOG_LEVEL="WARNING"),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            sweepers.append((proc, out, port))
            log(f"sweeper {n} pid {proc.pid}, metrics on 127.0.0.1:{port}")
        wait_for_metrics([port for _proc, _out, port in sweepers])
        bases = [i.base for i in instances]

        # 1. Flash sale: everyone at once, alternating instances.
        barrier = threading.Barrier(args.flash_buyers)
        won: list[dict[str, object]] = []
        flash_statuses: Counter[int] = Counter()

        def flash(i: int) -> None:
            barrier.wait(timeout=60)
            status, body = client.checkout(bases[i % 2], tokens[i], [{"product_id": 101, "qty": 1}])
            with client.lock:
                flash_statuses[status] += 1
                if status == 201:
                    won.append(body)

        log(f"flash sale: {args.flash_buyers} buyers for {args.flash_stock} units of product 101, both instances")
        t0 = time.monotonic()
        threads = [threading.Thread(target=flash, args=(i,)) for i in range(args.flash_buyers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        flash_seconds = time.monotonic() - t0
        for n, order in enumerate(won):
            client.pay(bases[(n + 1) % 2], order)

        # 2. Mixed traffic: checkout, then pay / cancel / abandon, spread over both instances.
        actions: Counter[str] = Counter()
        stop_at = time.monotonic() + args.seconds

        def shopper(i: int) -> None:
            rng = random.Random(i)
            n = 0
            while time.monotonic() < stop_at:
                n += 1
                base = bases[(i + n) % 2]
                items = [
                    {"product_id": pid, "qty": rng.randint(1, 2)}
                    for pid in rng.sample(range(102, 109), rng.randint(1, 2))
                ]
                status, body = client.checkout(base, tokens[i], items)
                if status != 201:
                    continue
                action = rng.choices(["pay", "cancel", "abandon"], weights=[5, 2, 3])[0]
                with client.lock:
                    actions[action] += 1
                other = bases[(i + n + 1) % 2]
                if action == "pay":
                    client.pay(other, body)
                elif action == "cancel":
                    client.cancel(other, tokens[i], int(body["order_id"]))

        log(f"mixed traffic: {args.shoppers} shoppers for {args.seconds}s (TTL {args.ttl}s, 2 sweepers every 1s)")
        t1 = time.monotonic()
        threads = [threading.Thread(target=shopper, args=(i,)) for i in range(args.shoppers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        mixed_seconds = time.monotonic() - t1

        # 3. Every abandoned cart must be swept (poll a readiness condition with a deadline).
        log("waiting for the sweepers to expire every abandoned cart")
        deadline = time.monotonic() + args.ttl + 60
        while True:
            pending = sql(direct, "SELECT count(*) FROM orders WHERE status = 'pending_payment'")[0][0]
            if pending == 0:
                break
            if time.monotonic() > deadline:
                failures.append(f"{pending} orders still pending after the deadline: the sweepers fell behind")
                break
            time.sleep(0.5)
        sweep_lag = time.monotonic() - t1 - mixed_seconds

        sweeper_metrics = [scrape(f"http://127.0.0.1:{port}/metrics") for _p, _o, port in sweepers]
        instance_metrics = [scrape(f"{base}/metrics") for base in bases]
    finally:
        for proc, out, _port in sweepers or []:
            if proc.poll() is None:
                proc.terminate()  # SIGTERM: the loop finishes its batch and exits
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            out.close()
        logged = []
        for item in reversed(started):
            if isinstance(item, Gunicorn):
                logged += [line for line in item.errors_in_log() if '"status_code": 503' not in line]
            item.stop()  # type: ignore[attr-defined]
        log("stopped: 2 sweepers, 2 gunicorn instances, pgbouncer (each by its pid)")

    # Verdict
    five_xx = sum(count for (_kind, status), count in client.statuses.items() if status >= 500)
    if five_xx:
        failures.append(f"{five_xx} responses were 5xx")
    if logged:
        failures.append(f"gunicorn logged errors, e.g. {logged[0]}")
    [(paid_units, available, reserved)] = sql(
        direct,
        f"""SELECT COALESCE((SELECT SUM(l.qty) FROM order_lines l JOIN orders o ON o.id = l.order_id
                   WHERE l.product_id = 101 AND o.id > {since} AND o.status = 'paid'), 0),
                  available_stock, reserved_stock FROM inventories WHERE product_id = 101""",
    )
    if (len(won), paid_units, available, reserved) != (args.flash_stock, args.flash_stock, 0, 0):
        failures.append(
            f"flash sale: {len(won)} created, {paid_units} paid units, stock left {available}/{reserved} "
            f"(expected {args.flash_stock} sold, 0 left)"
        )
    audit = manage(direct, "audit_inventory", check=False, quiet=True)
    if audit.returncode != 0:
        failures.append("audit_inventory: " + (audit.stdout + audit.stderr).strip()[-500:])
    expired_total = sum(m.get("skincare_sweeper_expired_reservations_total", 0) for m in sweeper_metrics)
    [(expired_db,)] = sql(direct, "SELECT count(*) FROM inventory_reservations WHERE status = 'expired'")
    if expired_total != expired_db:
        failures.append(f"sweeper metrics say {expired_total:.0f} expired, the database {expired_db}")

    def pct(kind: str, q: float) -> float:
        values = sorted(client.latencies.get(kind, [0.0]))
        return 1000 * values[min(len(values) - 1, int(q * len(values)))]

    requests = sum(client.statuses.values())
    print("\n=== make scaleout ===")
    print(f"stack: pgbouncer (transaction, pool 20) + 2 gunicorn x {args.workers} sync workers + 2 sweepers")
    print(
        f"flash sale: {args.flash_buyers} buyers, stock {args.flash_stock}: {dict(sorted(flash_statuses.items()))} in {flash_seconds:.2f}s; paid units {paid_units}, left {available}/{reserved}"
    )
    print(f"mixed: {mixed_seconds:.1f}s, checkouts then {dict(actions)}")
    print(f"requests: {requests} ({requests / max(mixed_seconds + flash_seconds, 1e-9):.0f}/s), 5xx: {five_xx}")
    for kind in sorted(client.latencies):
        statuses = {s: c for (k, s), c in sorted(client.statuses.items()) if k == kind}
        print(
            f"  {kind:<9} {statuses}  p50 {pct(kind, 0.5):.0f} ms  p99 {pct(kind, 0.99):.0f} ms  mean {1000 * statistics.fmean(client.latencies[kind]):.0f} ms"
        )
    print("per instance: " + ", ".join(f"{b}: {c} requests" for b, c in sorted(client.per_instance.items())))
    for n, m in enumerate(instance_metrics):
        created = m.get('skincare_checkout_requests_total{outcome="created"}', 0)
        conflicts = m.get('skincare_checkout_requests_total{outcome="stock_conflict"}', 0)
        retries = sum(v for k, v in m.items() if k.startswith("skincare_db_transaction_retries_total"))
        busy = sum(v for k, v in m.items() if k.startswith("skincare_db_busy_total"))
        print(
            f"  instance {n} /metrics: created {created:.0f}, stock_conflict {conflicts:.0f}, retries {retries:.0f}, busy {busy:.0f}"
        )
    for n, m in enumerate(sweeper_metrics):
        print(
            f"  sweeper {n} /metrics: expired reservations {m.get('skincare_sweeper_expired_reservations_total', 0):.0f}, "
            f"batches {m.get('skincare_sweeper_batches_total', 0):.0f}, "
            f"oldest overdue at last sweep {m.get('skincare_sweeper_oldest_overdue_seconds', 0):.1f}s"
        )
    print(
        f"sweep: every abandoned cart expired {sweep_lag:.1f}s after the traffic stopped (TTL {args.ttl}s); "
        f"{expired_db} reservations expired in total"
    )
    print(f"audit_inventory: {'clean' if audit.returncode == 0 else 'VIOLATIONS'}")
    (RESULTS / "scaleout.json").write_text(
        json.dumps(
            {"statuses": {f"{k}:{s}": c for (k, s), c in client.statuses.items()}, "failures": failures}, indent=2
        )
    )
    if failures:
        print("make scaleout: FAILED\n  " + "\n  ".join(failures))
        return 1
    print("make scaleout: passed")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "skincare.settings")
    sys.exit(main())
