"""``make restore-rehearsal``: an operator's mistake during a sale, undone by a point-in-time restore.

A PostgreSQL 15 server (:mod:`devtools.pgbackrest`: Debian's, the newest pgBackRest 2.45 supports) whose WAL
pgBackRest archives (``archive_timeout`` 5 s), a full base backup, one gunicorn instance (2 workers) and one sweeper
on it, and --shoppers buyers (:mod:`devtools.shop_load`) checking out, paying, cancelling and abandoning.

1. --before seconds of sale; the archive lag (time since the last archived segment, WAL bytes not yet archived) is
   sampled every 0.5 s: what losing the host would lose.
2. The mistake at T: ``TRUNCATE orders CASCADE`` (every order, line, reservation, payment and ledger row gone).
   The sale goes on for --after seconds; the current WAL segment is archived (``pg_switch_wal``); the stack stops.
3. A copy is restored next to it to T minus --offset seconds (``pgbackrest restore --type=time``, promoted at the
   target), started on a port of its own with archiving off. The restore time is measured from the restore command
   to the copy accepting writes.
4. The proof (:mod:`devtools.restore_proof`): nothing sent after the target is on the copy (read first); then a
   gunicorn and a sweeper on the copy: new checkouts are served, the sweeper expires the carts left pending at the
   target exactly once, and every checkout, payment and cancel answered before the target is on the copy (the
   client-side proof of ``make failover``); ``audit_inventory`` clean. Before the copy takes writes,
   ``sequences_advance`` moves its id sequences on: every order id the copy answers is above every one the primary
   answered, after the target included.
5. The client's count (:mod:`devtools.rehearsal_client`), of both sales: every request started ended counted (an
   answer, a time-out, an error), no shopper thread lost, at least twice as many shoppers as workers sent requests,
   at least :data:`MIN_REQUESTS` on the primary and :data:`MIN_REQUESTS_COPY` on the copy; none failed on the copy
   (on the primary after the mistake, failures are what the rehearsal is about).

Prints the backup time, the archive lag (the recovery point a lost host would give), the restore time and what the
proof counted. Every process it started is stopped; data in ``.data/restore`` (git-ignored), recreated every run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import psycopg

from devtools import pgbackrest
from devtools.failover_proof import check
from devtools.pgbackrest import Repository, Server
from devtools.processes import RESULTS, ROOT, Stack, ctl, flash_sale_setup, log, manage
from devtools.proof_snapshot import read_snapshot
from devtools.rehearsal_client import failed, tally, verdict
from devtools.restore_proof import after_problems, split_at
from devtools.shop_load import ShopLoad, wait_until

DBNAME = "skincare_restore"
BASE = ROOT / ".data" / "restore"
CUSTOMER_PREFIX = "restore"
FLASH_PRODUCT = 101
PRODUCTS = list(range(4001, 4009))
MISTAKE = "TRUNCATE orders CASCADE"
SEGMENT_BYTES = 16 * 1024 * 1024
WORKERS = 2  # the one gunicorn instance's workers
# The run's stated minimum: shoppers who sent requests (twice the workers: each of them serving one at least) and
# requests started, on the primary (--before + --after seconds of sale) and on the restored copy (3 s).
MIN_SHOPPERS = 2 * WORKERS
MIN_REQUESTS = 200
MIN_REQUESTS_COPY = 20

ARCHIVE_LAG = """
SELECT EXTRACT(epoch FROM clock_timestamp() - last_archived_time), last_archived_wal, pg_current_wal_lsn()::text
  FROM pg_stat_archiver
"""


@dataclass
class Rehearsal:
    args: argparse.Namespace
    primary: Server = field(default_factory=lambda: Server(BASE / "primary"))
    copy: Server = field(default_factory=lambda: Server(BASE / "copy"))
    facts: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    lags: list[tuple[float, int | None]] = field(default_factory=list)  # (seconds, bytes) not yet archived


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m devtools.restore_rehearsal")
    parser.add_argument("--before", type=float, default=15, help="seconds of sale before the mistake")
    parser.add_argument("--after", type=float, default=3, help="seconds of sale after the mistake")
    parser.add_argument("--offset", type=float, default=1.0, help="restore to this many seconds before the mistake")
    parser.add_argument("--shoppers", type=int, default=MIN_SHOPPERS, help=f"at least {MIN_SHOPPERS}")
    parser.add_argument("--pause", type=float, default=0.05)
    parser.add_argument("--ttl", type=int, default=6, help="RESERVATION_TTL_SECONDS (short, so carts expire)")
    parser.add_argument("--after-failover", type=float, default=8, help="Patroni: seconds of sale on the new leader")
    return parser.parse_args(argv)


def unarchived_bytes(last_archived: str | None, current_lsn: str) -> int | None:
    """WAL bytes written after the end of the last archived segment (all of it when nothing was archived yet); None
    when the last file archived was a backup label or a timeline history file (they do not say which segment was)."""
    high, low = (int(part, 16) for part in current_lsn.split("/"))
    current = (high << 32) + low
    if not last_archived:
        return current
    if len(last_archived) != 24:
        return None
    log_id, seg = int(last_archived[8:16], 16), int(last_archived[16:24], 16)
    return max(0, current - ((log_id << 32) + (seg + 1) * SEGMENT_BYTES))


def archive_lag(conninfo: str) -> tuple[float, int | None]:
    """(seconds since the last segment was archived, WAL bytes not yet archived) of the server at ``conninfo``."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        row = conn.execute(ARCHIVE_LAG).fetchone()
    assert row is not None
    seconds, wal, lsn = row
    return (float(seconds) if seconds is not None else float("inf")), unarchived_bytes(wal, lsn)


def set_up(r: Rehearsal) -> tuple[Repository, list[str]]:
    """The server, its stanza (archiving checked), the database with the sale, a full backup."""
    shutil.rmtree(BASE, ignore_errors=True)
    BASE.mkdir(parents=True)
    repo = Repository.for_server(BASE / "backup", r.primary)
    repo.write_config()
    r.primary.initdb(
        pgbackrest.server_settings(
            port=r.primary.port, socket_dir=r.primary.socket_dir, config=repo.config, archive=True
        )
    )
    r.primary.prepare_dirs()
    pgbackrest.give_to_postgres(BASE)  # the repository too belongs to the OS user postgres
    r.primary.start()
    repo.run("stanza-create")
    repo.run("check")  # a WAL segment pushed and found in the repository: archiving works
    log(
        f"PostgreSQL 15 on 127.0.0.1:{r.primary.port}, WAL archived by pgBackRest (archive_timeout "
        f"{pgbackrest.ARCHIVE_TIMEOUT_SECONDS}s); stanza '{pgbackrest.STANZA}' checked"
    )
    with psycopg.connect(r.primary.conninfo("postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{DBNAME}"')
    return repo, prepare_database(r, repo, r.primary.url(DBNAME))


def prepare_database(r: Rehearsal, repo: Repository, url: str) -> list[str]:
    """The created database migrated, with the sale's products and the shoppers' tokens; then a full backup."""
    manage(url, "migrate", "--noinput", "-v0")
    manage(url, "load_demo_data", quiet=True)
    ctl(url, "seed-spread", str(PRODUCTS[0]), str(len(PRODUCTS)), "1000000")
    flash_sale_setup(url, 150)
    tokens_file = RESULTS / "restore-tokens.json"
    ctl(url, "tokens", str(r.args.shoppers), CUSTOMER_PREFIX, str(tokens_file))
    r.facts["full_backup_seconds"] = round(repo.timed("backup", "--type=full"), 1)
    log(f"full backup in {r.facts['full_backup_seconds']}s")
    return list(json.loads(tokens_file.read_text()))


def stack_on(url: str, r: Rehearsal, name: str) -> Stack:
    env = {"RESERVATION_TTL_SECONDS": r.args.ttl, "ACCESS_LOG": "false", "DB_LOCK_TIMEOUT_MS": 2000}
    return Stack(url, name=name, workers=WORKERS, env=env, instances=1, sweepers=1)


def sale_and_mistake(
    r: Rehearsal,
    tokens: list[str],
    *,
    url: str,
    primary: Callable[[str], str],
    midway: Callable[[], None] = lambda: None,
) -> tuple[ShopLoad, float, Any]:
    """The sale on ``url``, the archive lag sampled, ``midway()`` after --before seconds, the mistake on the primary
    (``primary(dbname)``: its conninfo at that moment); returns the load, T (monotonic) and T (the server's clock)."""
    stack = stack_on(url, r, "restore-primary").start_instances().start_sweepers()
    customers = [f"{CUSTOMER_PREFIX}-{i:05d}" for i in range(len(tokens))]
    load = ShopLoad(stack.bases[0], tokens, customers, FLASH_PRODUCT, PRODUCTS, "rp", pause=r.args.pause)
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(0.5):
            with contextlib.suppress(psycopg.OperationalError):  # the primary's host lost (--patroni)
                r.lags.append(archive_lag(primary("postgres")))

    sampler = threading.Thread(target=sample, daemon=True)
    try:
        log(f"sale: {r.args.shoppers} shoppers on {stack.bases[0]} for {r.args.before}s, then the mistake")
        load.start(r.args.shoppers)
        sampler.start()
        time.sleep(r.args.before)  # pacing: the sale runs before the mistake
        midway()
        r.facts["archive_lag_at_T"] = archive_lag(primary("postgres"))
        with psycopg.connect(primary(DBNAME)) as conn:
            before = time.monotonic()
            row = conn.execute("SELECT clock_timestamp()").fetchone()
            t_mono = (before + time.monotonic()) / 2
            conn.execute(MISTAKE)
        assert row is not None
        t_db = row[0]
        log(f"MISTAKE at T = {t_db.isoformat()}: {MISTAKE}")
        time.sleep(r.args.after)  # pacing: the sale goes on, on the damaged database
        load.stop()
        sampling.set()
        sampler.join()
        started = time.monotonic()
        with psycopg.connect(primary("postgres"), autocommit=True) as conn:
            conn.execute("SELECT pg_switch_wal()")
        if not wait_until(lambda: archive_lag(primary("postgres"))[1] == 0, 60):
            r.failures.append("the last WAL segment was not archived within 60s")
        r.facts["archive_flush_seconds"] = round(time.monotonic() - started, 2)
    finally:
        load.stop()
        sampling.set()
        stack.stop(expected=('"status_code": 5',))  # after the mistake, errors are what the rehearsal is about
    counted = tally(load.recorder)
    r.facts["client_on_primary"] = counted.facts()
    r.failures += verdict(counted, min_requests=MIN_REQUESTS, min_shoppers=MIN_SHOPPERS, failures_allowed=True)
    return load, t_mono, t_db


def restore(r: Rehearsal, repo: Repository, t_db: Any, *options: str) -> None:
    target = t_db - timedelta(seconds=r.args.offset)
    r.facts["restore_target"] = target.isoformat()
    started = time.monotonic()
    r.copy.prepare_dirs()
    repo.run(
        "restore",
        f"--pg1-path={r.copy.pgdata}",
        "--type=time",
        f"--target={target.isoformat(sep=' ')}",
        "--target-action=promote",
        *options,
    )
    r.copy.configure(
        pgbackrest.server_settings(port=r.copy.port, socket_dir=r.copy.socket_dir, config=repo.config, archive=False)
    )
    r.copy.prepare_dirs()
    r.copy.start()

    def writable() -> bool:
        try:
            with psycopg.connect(r.copy.conninfo(DBNAME), autocommit=True) as conn:
                row = conn.execute("SELECT NOT pg_is_in_recovery()").fetchone()
                return bool(row and row[0])
        except psycopg.OperationalError:
            return False

    if not wait_until(writable, 300):
        r.failures.append("the restored copy did not accept writes within 300s")
    r.facts["restore_seconds"] = round(time.monotonic() - started, 1)
    stop_line = next((line for line in r.copy.log().splitlines() if "recovery stopping" in line), "")
    r.facts["recovery_stopped"] = stop_line.split("LOG:", 1)[-1].strip()
    log(f"copy on 127.0.0.1:{r.copy.port} writable {r.facts['restore_seconds']}s after `pgbackrest restore` began")


def prove(r: Rehearsal, load: ShopLoad, t_mono: float, tokens: list[str]) -> None:
    calls = load.calls
    split = split_at(calls, t_mono - r.args.offset)
    conninfo = r.copy.conninfo(DBNAME)
    first = read_snapshot(conninfo, customer_prefix=CUSTOMER_PREFIX, event_prefix="evt-rp-")
    r.failures += after_problems(split.after, first)
    # Before the copy takes writes: ids issued after the target (known to customers and the gateway) never come again.
    manage(r.copy.url(DBNAME), "sequences_advance", quiet=True)
    stack = stack_on(r.copy.url(DBNAME), r, "restore-copy").start_instances().start_sweepers()
    customers = [f"{CUSTOMER_PREFIX}-{i:05d}" for i in range(len(tokens))]
    resumed = ShopLoad(stack.bases[0], tokens, customers, FLASH_PRODUCT, PRODUCTS, "rc", pause=r.args.pause)
    try:
        resumed.start(r.args.shoppers)
        time.sleep(3)  # pacing: a few seconds of sale on the restored copy
        resumed.stop()
        if not wait_until(lambda: overdue(conninfo) == 0, r.args.ttl + 60):
            r.failures.append("the sweeper on the copy did not expire every overdue cart")
        second = read_snapshot(conninfo, customer_prefix=CUSTOMER_PREFIX, event_prefix="evt-r")
        audit = manage(r.copy.url(DBNAME), "audit_inventory", check=False, quiet=True)
    finally:
        stack.stop(expected=())
    after_resume = resumed.calls
    counted = tally(resumed.recorder)
    r.facts["client_on_copy"] = counted.facts()
    r.failures += [
        f"on the restored copy: {problem}"
        for problem in verdict(counted, min_requests=MIN_REQUESTS_COPY, min_shoppers=MIN_SHOPPERS)
    ]
    if bad := failed(after_resume):
        r.failures.append(f"e.g. on the restored copy: {bad[0].status} {bad[0].error}")
    if not any(c.kind == "checkout" and c.status == 201 for c in after_resume):
        r.failures.append("no checkout was served by the restored copy")
    r.failures += check(split.before + after_resume, second)
    r.failures += reissued_orders(calls, after_resume)
    if audit.returncode != 0:
        r.failures.append("audit_inventory on the copy: " + (audit.stdout + audit.stderr).strip()[-400:])
    acknowledged = Counter(f"{c.kind}:{c.status}" for c in split.before if c.status < 300)
    r.facts["answered_before_target"] = dict(sorted(acknowledged.items()))
    r.facts["in_flight_at_target"] = len(split.in_flight)
    r.facts["sent_after_target_none_on_copy"] = len(split.after)
    r.facts["orders_on_copy_at_target"] = len(first.orders)
    r.facts["pending_at_target_expired_by_copy_sweeper"] = sum(
        1 for o, s in first.orders.items() if s == "pending_payment" and second.orders.get(o) == "cancelled"
    )
    r.facts["highest_order_id_primary_answered"] = max(created_orders(calls), default=None)
    r.facts["lowest_order_id_copy_answered"] = min(created_orders(after_resume), default=None)
    r.facts["served_by_copy"] = dict(sorted(Counter(f"{c.kind}:{c.status}" for c in after_resume).items()))
    r.facts["audit_inventory_on_copy"] = "clean" if audit.returncode == 0 else "VIOLATIONS"


def created_orders(calls: list[Any]) -> list[int]:
    return [int(c.body["order_id"]) for c in calls if c.kind == "checkout" and c.status == 201]


def reissued_orders(primary_calls: list[Any], copy_calls: list[Any]) -> list[str]:
    """An order id the restored copy answered that the primary had already answered (before or after the target):
    two customers, and possibly the gateway, would know one id for two orders."""
    highest = max(created_orders(primary_calls), default=0)
    again = sorted(order for order in created_orders(copy_calls) if order <= highest)
    return [f"the copy issued order ids the primary had issued up to {highest}: {again[:5]}"] if again else []


def overdue(conninfo: str) -> int:
    with psycopg.connect(conninfo) as conn:
        row = conn.execute(
            "SELECT count(*) FROM orders WHERE status = 'pending_payment' AND payment_expires_at < now()"
        ).fetchone()
    return int(row[0]) if row else -1


def report(r: Rehearsal, name: str = "make restore-rehearsal") -> int:
    seconds, unarchived = r.facts.pop("archive_lag_at_T", (0.0, 0))
    r.facts["recovery_point_at_T"] = (
        f"{seconds:.1f}s since the last archived segment, {unarchived} WAL bytes not yet archived "
        "(what losing the host at T would have lost)"
    )
    worst_seconds = max((s for s, _b in r.lags), default=0.0)
    worst_bytes = max((b for _s, b in r.lags if b is not None), default=0)
    r.facts["recovery_point_worst_sampled"] = (
        f"{worst_seconds:.1f}s, {worst_bytes} bytes ({len(r.lags)} samples every 0.5 s; "
        f"bound: archive_timeout {pgbackrest.ARCHIVE_TIMEOUT_SECONDS}s + one archive-push)"
    )
    print(f"\n=== {name} ===")
    for key, value in r.facts.items():
        print(f"{key}: {value}")
    (RESULTS / f"{name.replace('make ', '').replace(' ', '-')}.json").write_text(
        json.dumps({"facts": r.facts, "failures": r.failures}, indent=2, default=str)
    )
    if r.failures:
        print(f"{name}: FAILED\n  " + "\n  ".join(r.failures[:30]))
        return 1
    print(f"{name}: passed (everything answered before the target is on the copy, nothing after it)")
    return 0


def main(argv: list[str] | None = None) -> int:
    r = Rehearsal(parse_args(argv))
    if missing := pgbackrest.binaries_missing():
        raise SystemExit(f"make restore-rehearsal needs {', '.join(missing)} (as root: make pgbackrest-deps)")
    RESULTS.mkdir(exist_ok=True)
    try:
        repo, tokens = set_up(r)
        load, t_mono, t_db = sale_and_mistake(r, tokens, url=r.primary.url(DBNAME), primary=r.primary.conninfo)
        r.primary.stop()  # the damaged server is left alone (here: stopped, to spare the two cores)
        restore(r, repo, t_db)
        prove(r, load, t_mono, tokens)
    finally:
        r.copy.stop()
        r.primary.stop()
        for server in (r.primary, r.copy):
            (RESULTS / f"restore-{server.base.name}-postgresql.log").write_text(server.log())
        log("stopped: the copy's and the primary's PostgreSQL (pg_ctl stop), gunicorns and sweepers by pid")
    return report(r)


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.exit(main())
