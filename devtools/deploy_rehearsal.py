"""``make deploy-rehearsal``: a release rolled through every instance, a gunicorn reload and a schema migration, all
during a flash sale, with zero failed requests.

The shape of ``make scaleout``: PostgreSQL → PgBouncer (transaction mode) → two gunicorn instances (+ two sweepers)
→ HAProxy (:mod:`devtools.haproxy`, with production's settings: its queue timeout, one request per worker thread);
--shoppers buyers (:mod:`devtools.shop_load`; by default and at least twice the requests the instances serve at once,
so every worker thread is busy and a request waits for each) check out the flash product (FLASH_STOCK units) or the others, then
pay, cancel or abandon, every request through HAProxy, none retried. The instances start as release
:data:`OLD_RELEASE`; every answer names the release that gave it (``X-Release``, from ``RELEASE_ID``).

1. --before seconds of sale: the checkouts' p99 before.
2. A real additive migration, applied with ``manage.py migrate`` (short lock waits, retries) on the primary while
   the sale runs: a nullable column on ``orders``, then a concurrent index on it. The two migration files are
   written into ``orders/migrations/`` for the run and removed after it (never committed); the migration guard
   (:mod:`devtools.migration_guard`) checks their SQL first. The checkouts' p99 during it.
3. The rolling release of :data:`NEW_RELEASE`, one instance at a time: drained in HAProxy (runtime API ``state
   drain``, until its requests in flight finished), stopped (SIGTERM: its workers finish), the new release started on
   the same port, ready (``/readyz``), back in (``state ready``, until HAProxy's check sees it UP).
4. An in-place reload of each instance (SIGHUP: gunicorn starts new workers with the code and configuration on disk
   and stops the old ones gracefully), until every worker is new and ``/readyz`` answers.
5. --after seconds more; the load stops; the sweepers expire every abandoned cart.

Passes when: every request started ended counted and none failed (no 5xx, no error, no time-out), no shopper thread
was lost, at least :data:`MIN_REQUESTS` requests and twice as many shoppers as worker threads sent any; every answer
started before the release came from the old one and every answer started after it from the new one (the shoppers
saw the release arrive); the client-side proof of
``make failover`` holds (every 201, 200 webhook and 200 cancel is in the database; keys map to one order each; sweeps
exactly once), the flash product's units add up exactly (sold + available = stock, nothing reserved) and
``audit_inventory`` is clean. Every process it started is stopped by its pid.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from config.environment import web_threads
from devtools import migration_guard
from devtools.failover_proof import Call, check
from devtools.haproxy import HAProxy
from devtools.pgbouncer import PgBouncer
from devtools.processes import (
    RESULTS,
    ROOT,
    Gunicorn,
    Stack,
    ctl,
    flash_sale_setup,
    log,
    manage,
    query,
    recreate_database,
    server_url,
)
from devtools.proof_snapshot import read_snapshot
from devtools.rehearsal_client import failed, tally, verdict
from devtools.shop_load import ShopLoad, count, p99_ms, wait_until

DBNAME = "skincare_scaleout_deploy"
CUSTOMER_PREFIX = "deploy"
KEY_PREFIX = "dp"
FLASH_PRODUCT = 101
PRODUCTS = list(range(3001, 3009))
MIGRATIONS_DIR = ROOT / "orders" / "migrations"
SCRATCH = ("9001_deploy_rehearsal_column", "9002_deploy_rehearsal_index")
INSTANCES = 2
OLD_RELEASE, NEW_RELEASE = "rehearsal-old", "rehearsal-new"  # RELEASE_ID before and after the rolling release
# The run's stated minimum of requests started (a run of the defaults sends thousands; fewer: the load did not run).
MIN_REQUESTS = 1000

COLUMN_MIGRATION = """# Written by make deploy-rehearsal for its run and removed after it: never commit this file.
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("orders", "{leaf}")]
    operations = [migrations.AddField("order", "rehearsal_note", models.TextField(null=True))]
"""

INDEX_MIGRATION = """# Written by make deploy-rehearsal for its run and removed after it: never commit this file.
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run in a transaction
    dependencies = [("orders", "{column}")]
    operations = [
        AddIndexConcurrently("order", models.Index(fields=["rehearsal_note"], name="orders_rehearsal_note_idx"))
    ]
"""


def scratch_migrations(leaf: str) -> dict[str, str]:
    """The two scratch migration files (name → source) on top of the orders app's latest migration ``leaf``."""
    return {
        SCRATCH[0]: COLUMN_MIGRATION.format(leaf=leaf),
        SCRATCH[1]: INDEX_MIGRATION.format(column=SCRATCH[0]),
    }


def orders_leaf(directory: Path = MIGRATIONS_DIR) -> str:
    names = sorted(p.stem for p in directory.glob("[0-9][0-9][0-9][0-9]_*.py") if p.stem not in SCRATCH)
    return names[-1]


@dataclass
class Rehearsal:
    args: argparse.Namespace
    direct: str = ""
    facts: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    logged: list[str] = field(default_factory=list)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m devtools.deploy_rehearsal")
    parser.add_argument("--before", type=float, default=10, help="seconds of sale before the changes")
    parser.add_argument("--after", type=float, default=5, help="seconds of sale after the changes")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers per instance")
    parser.add_argument("--shoppers", type=int, help="default and least: twice the worker threads of both instances")
    parser.add_argument("--pause", type=float, default=0.05, help="a shopper's pause between two checkouts")
    parser.add_argument("--flash-stock", type=int, default=150)
    parser.add_argument("--ttl", type=int, default=6, help="RESERVATION_TTL_SECONDS (short, so carts expire)")
    args = parser.parse_args(argv)
    if args.shoppers is None:
        args.shoppers = min_shoppers(args.workers)
    return args


def min_shoppers(workers: int) -> int:
    """Twice the requests all instances serve at once (their workers' threads): each busy, and a request waiting in
    HAProxy's queue for each."""
    return 2 * INSTANCES * workers * web_threads()


def front(servers: dict[str, int], workers: int) -> HAProxy:
    """HAProxy as production runs it: its queue timeout (deploy.haproxy.render's, the one place the bound is set, no
    rehearsal's own) and one request at a time per worker thread."""
    return HAProxy(servers, maxconn=workers * web_threads())


def release_problems(calls: list[Call], *, rolled_from: float, rolled_until: float) -> list[str]:
    """The release as the shoppers saw it: every answer names one of the two releases; those to requests started
    before the rolling release began are all the old one's, those started after it ended are all the new one's (and
    there are some)."""
    answers = [c for c in calls if c.outcome == "answer"]
    problems = [
        f"{len(odd)} answers named no release of the run, e.g. {odd[0].release!r}"
        for odd in [[c for c in answers if c.release not in (OLD_RELEASE, NEW_RELEASE)]]
        if odd
    ]
    before = [c for c in answers if c.ended <= rolled_from]
    after = [c for c in answers if c.started >= rolled_until]
    if not before or not after:
        problems.append(f"answers before the release: {len(before)}, after it: {len(after)} (both needed)")
    if stale := [c for c in after if c.release != NEW_RELEASE]:
        problems.append(f"{len(stale)} answers after the release came from {stale[0].release!r}, not {NEW_RELEASE}")
    if early := [c for c in before if c.release != OLD_RELEASE]:
        problems.append(f"{len(early)} answers before the release came from {early[0].release!r}")
    return problems


def prepare(r: Rehearsal) -> list[str]:
    r.direct = server_url(DBNAME)
    log(f"fresh database {r.direct.split('?')[0]}")
    recreate_database(r.direct)
    ctl(r.direct, "seed-spread", str(PRODUCTS[0]), str(len(PRODUCTS)), "1000000")
    flash_sale_setup(r.direct, r.args.flash_stock)
    tokens_file = RESULTS / "deploy-tokens.json"
    ctl(r.direct, "tokens", str(r.args.shoppers), CUSTOMER_PREFIX, str(tokens_file))
    return list(json.loads(tokens_file.read_text()))


def apply_migration(r: Rehearsal) -> tuple[float, float]:
    """The scratch migrations written, guarded, applied on the primary; removed again. Returns (start, end)."""
    files = [MIGRATIONS_DIR / f"{name}.py" for name in SCRATCH]
    try:
        for name, source in scratch_migrations(orders_leaf()).items():
            (MIGRATIONS_DIR / f"{name}.py").write_text(source)
        for name in SCRATCH:
            sql = manage(r.direct, "sqlmigrate", "orders", name, quiet=True).stdout
            if findings := migration_guard.check_statements([sql]):
                r.failures.append(f"the migration guard refused {name}: {findings[0]}")
                return time.monotonic(), time.monotonic()
        log("migration: orders.rehearsal_note (nullable column), then a concurrent index on it, during the sale")
        started = time.monotonic()
        proc = manage(r.direct, "migrate", "orders", "--noinput", check=False, quiet=True)
        ended = time.monotonic()
        retries = (proc.stdout + proc.stderr).count("a lock was not granted")
        r.facts["migration_seconds"] = round(ended - started, 2)
        r.facts["migration_lock_refusals_retried"] = retries
        if proc.returncode != 0:
            r.failures.append("migrate failed: " + (proc.stdout + proc.stderr).strip()[-400:])
        [(column, index)] = query(
            r.direct,
            "SELECT count(*) FILTER (WHERE column_name = 'rehearsal_note'), "
            "(SELECT count(*) FROM pg_indexes WHERE indexname = 'orders_rehearsal_note_idx') "
            "FROM information_schema.columns WHERE table_name = 'orders'",
        )
        if (column, index) != (1, 1):
            r.failures.append(f"after the migration: column {column}, index {index} (expected 1 and 1)")
        return started, ended
    finally:
        for path in files:
            path.unlink(missing_ok=True)


def roll(r: Rehearsal, stack: Stack, lb: HAProxy) -> None:
    """Each instance drained, stopped, started again on its port, ready, back in; one at a time."""
    for n, old in enumerate(list(stack.instances)):
        name = f"web{n}"
        drained = lb.drain(name)
        r.logged += [line for line in old.errors_in_log() if '"status_code": 503' not in line]
        old.stop()
        new = Gunicorn(old_url(old), workers=r.args.workers, extra_env=instance_env(r, NEW_RELEASE))
        new.port, new.base, new.env["PORT"] = old.port, old.base, str(old.port)
        new.log_path = RESULTS / f"gunicorn-{old.port}-release.log"
        restart = time.monotonic()
        stack.instances[n] = new
        new.start()
        started = time.monotonic() - restart
        back = lb.ready(name)
        log(
            f"release: {name} drained in {drained:.2f}s, new gunicorn (pid {new.proc.pid if new.proc else '?'}) "
            f"ready in {started:.1f}s, UP in HAProxy {back:.2f}s later"
        )
        r.facts[f"release_{name}"] = {
            "drain_s": round(drained, 2),
            "start_s": round(started, 1),
            "up_s": round(back, 2),
        }


def reload_in_place(r: Rehearsal, stack: Stack) -> None:
    """SIGHUP to each master: new workers, the old ones stopped gracefully; until every worker is new."""
    for n, instance in enumerate(stack.instances):
        assert instance.proc is not None
        before = set(instance.worker_pids())
        started = time.monotonic()
        instance.proc.send_signal(signal.SIGHUP)

        def renewed(instance: Gunicorn = instance, before: set[int] = before) -> bool:
            pids = set(instance.worker_pids())
            return len(pids) == r.args.workers and not pids & before and ready(instance.base)

        if not wait_until(renewed, 60):
            r.failures.append(f"web{n}: the workers were not all replaced within 60s of SIGHUP")
        took = time.monotonic() - started
        log(f"reload: web{n} (pid {instance.proc.pid}) SIGHUP, every worker new in {took:.1f}s")
        r.facts[f"reload_web{n}_s"] = round(took, 1)


def ready(base: str) -> bool:
    try:
        with urllib.request.urlopen(base + "/readyz", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def old_url(instance: Gunicorn) -> str:
    return instance.env["DATABASE_URL"]


def instance_env(r: Rehearsal, release: str) -> dict[str, Any]:
    return {"DB_PGBOUNCER": "true", "RESERVATION_TTL_SECONDS": r.args.ttl, "ACCESS_LOG": "false", "RELEASE_ID": release}


def pending(url: str) -> int:
    return int(query(url, "SELECT count(*) FROM orders WHERE status = 'pending_payment'")[0][0])


def judge(r: Rehearsal, load: ShopLoad, rolled: tuple[float, float]) -> None:
    calls = load.calls
    counted = tally(load.recorder)
    r.facts["client"] = counted.facts()
    r.facts["client_minimum"] = {"requests": MIN_REQUESTS, "shoppers": min_shoppers(r.args.workers)}
    r.failures += verdict(counted, min_requests=MIN_REQUESTS, min_shoppers=min_shoppers(r.args.workers))
    if bad := failed(calls):
        r.failures.append(f"e.g. {bad[0].kind} {bad[0].status} {bad[0].error or bad[0].body}")
    r.facts["answers_by_release"] = dict(sorted(Counter(c.release for c in calls if c.outcome == "answer").items()))
    r.failures += release_problems(calls, rolled_from=rolled[0], rolled_until=rolled[1])
    conninfo = r.direct.replace("postgres://", "postgresql://", 1)
    problems = check(calls, read_snapshot(conninfo, customer_prefix=CUSTOMER_PREFIX, event_prefix=f"evt-{KEY_PREFIX}-"))
    r.facts["proof"] = "holds" if not problems else f"{len(problems)} problems"
    r.failures += problems[:20]
    [(sold, available, reserved)] = query(
        r.direct,
        f"""SELECT COALESCE((SELECT SUM(l.qty) FROM order_lines l JOIN orders o ON o.id = l.order_id
                   WHERE l.product_id = {FLASH_PRODUCT} AND o.status = 'paid'), 0),
                  available_stock, reserved_stock FROM inventories WHERE product_id = {FLASH_PRODUCT}""",
    )
    r.facts["flash_stock"] = f"{sold} sold + {available} available + {reserved} reserved of {r.args.flash_stock}"
    if (sold + available, reserved) != (r.args.flash_stock, 0):
        r.failures.append(f"flash product: {r.facts['flash_stock']}")
    audit = manage(r.direct, "audit_inventory", check=False, quiet=True)
    r.facts["audit_inventory"] = "clean" if audit.returncode == 0 else "VIOLATIONS"
    if audit.returncode != 0:
        r.failures.append("audit_inventory: " + (audit.stdout + audit.stderr).strip()[-400:])
    if r.logged:
        r.failures.append(f"gunicorn logged errors, e.g. {r.logged[0][:300]}")


def main(argv: list[str] | None = None) -> int:
    r = Rehearsal(parse_args(argv))
    RESULTS.mkdir(exist_ok=True)
    tokens = prepare(r)
    bouncer = PgBouncer.for_url(r.direct, default_pool_size=20).start()
    stack = Stack(
        bouncer.url(DBNAME),
        name="deploy",
        workers=r.args.workers,
        env=instance_env(r, OLD_RELEASE),
        instances=INSTANCES,
        sweeper_env={"DB_PGBOUNCER": "true"},
    )
    lb = load = None
    try:
        stack.start_instances().start_sweepers()
        servers = {f"web{n}": instance.port for n, instance in enumerate(stack.instances)}
        lb = front(servers, r.args.workers).start()
        r.facts["front"] = f"timeout queue {lb.queue_timeout_ms} ms, maxconn {lb.maxconn} per instance"
        log(f"stack: haproxy {lb.base} -> {', '.join(stack.bases)} -> pgbouncer :{bouncer.port}; 2 sweepers")
        customers = [f"{CUSTOMER_PREFIX}-{i:05d}" for i in range(len(tokens))]
        load = ShopLoad(lb.base, tokens, customers, FLASH_PRODUCT, PRODUCTS, KEY_PREFIX, pause=r.args.pause)
        log(
            f"sale: {r.args.shoppers} shoppers through haproxy ({r.args.flash_stock} units of product 101 + others), "
            f"release {OLD_RELEASE}"
        )
        t0 = time.monotonic()
        load.start(r.args.shoppers)
        time.sleep(r.args.before)  # pacing: the sale runs undisturbed for a while
        mig_start, mig_end = apply_migration(r)
        rolled_from = time.monotonic()
        roll(r, stack, lb)
        rolled = (rolled_from, time.monotonic())
        reload_in_place(r, stack)
        time.sleep(r.args.after)  # pacing: the sale goes on after the changes
        load.stop()
        log(f"load stopped after {time.monotonic() - t0:.1f}s: {dict(load.actions)}")
        calls = load.calls
        r.facts["checkout_p99_before_ms"] = round(p99_ms(calls, since=t0, until=mig_start))
        r.facts["checkouts_before"] = count(calls, since=t0, until=mig_start)
        r.facts["checkout_p99_during_migration_ms"] = round(p99_ms(calls, since=mig_start, until=mig_end))
        r.facts["checkouts_during_migration"] = count(calls, since=mig_start, until=mig_end)
        r.facts["checkout_p99_whole_run_ms"] = round(p99_ms(calls))
        if not wait_until(lambda: pending(r.direct) == 0, r.args.ttl + 60):
            r.failures.append("the sweepers did not expire every abandoned cart within the deadline")
        r.facts["statuses"] = dict(sorted(Counter(f"{c.kind}:{c.status}" for c in calls).items()))
        judge(r, load, rolled)
    finally:
        if load is not None:
            load.stop()
        if lb is not None:
            lb.stop()
        r.logged += stack.stop(expected=('"status_code": 503',))
        bouncer.stop()
        log("stopped: haproxy, 2 sweepers, 2 gunicorn instances, pgbouncer (each by its pid)")
    return report(r)


def report(r: Rehearsal) -> int:
    print("\n=== make deploy-rehearsal ===")
    for key, value in r.facts.items():
        print(f"{key}: {value}")
    (RESULTS / "deploy-rehearsal.json").write_text(json.dumps({"facts": r.facts, "failures": r.failures}, indent=2))
    if r.failures:
        print("make deploy-rehearsal: FAILED\n  " + "\n  ".join(r.failures[:30]))
        return 1
    print(
        "make deploy-rehearsal: passed (every request counted, zero failed, no thread lost; the new release seen; "
        "nothing lost; exact stock; audit clean)"
    )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.exit(main())
