"""The inventory-strategy matrix of ``make bench``: every ``InventoryStrategy`` x {hot, spread, multi, soldout},
through HTTP (wrk + bench/checkout.lua against gunicorn, as in bench.run) and as raw SQL in pgbench (the statements
the service sends for that strategy), on the benchmark database.

For each strategy: ``products.inventory_strategy`` of every benchmark product (the hot SKU, the 1000 spread
products, the sold-out SKU) is set with one UPDATE, the four scenarios run through HTTP and then in pgbench, and
``manage.py audit_inventory`` checks the books. Writes bench-results/strategies.json and a markdown table, printed
and written between the ``strategies`` markers of docs/strategies.md (bench-results/strategies.md when that file
does not exist, or with --no-docs).

    python -m bench.strategies                           # fresh skincare_bench, the whole matrix (about 7 minutes)
    python -m bench.strategies --duration 2 --strategies guarded_update,row_lock_nowait --scenarios hot,soldout --no-docs

``python -m bench.run`` (``make bench``) runs it after the main suite, on the same database (``--no-strategies``
skips it).

The pgbench scripts are built from the service's own statement texts (``payments.checkout.QUOTES_SQL`` and
``ORDER_SQL``, ``inventory.reserve.RESERVE_SQL``; see ``pgbench_sql``), in the order ``stock_reserve`` sends them
for each strategy, with the values the benchmark's settings give: no pending-order cap (devtools.processes sets
MAX_PENDING_ORDERS_PER_CUSTOMER=0, so no pending count), no ``max_per_customer`` on the benchmark products, no
checkout rate limit, no Idempotency-Key; the customer's checkout lock is taken on a key drawn per transaction (one
bench customer places every order); the token lookup is left out, as in bench.drivers' limits:

* every strategy's last step is the reserve statement on bucket 0 (``RESERVE_SQL``: the guarded UPDATE with its
  reserve ledger row), whose answer (the bucket taken, or no row) ``\\aset`` keeps; no row rolls back (409);
* ``row_lock``: ``SELECT … FOR NO KEY UPDATE`` of the row first; ``advisory``: ``pg_advisory_xact_lock(key)`` with
  the service's key (``skincare.locks.advisory_key``); ``optimistic``: ``AND version = :seen`` (the version of the
  quote read), a lost check rolls back, sleeps the service's jittered backoff and runs the transaction again from
  the start, up to INVENTORY_OPTIMISTIC_ATTEMPTS (5) tries (unrolled with ``\\if``);
* ``row_lock_nowait``: pgbench aborts a client on any error but a serialization failure or a deadlock, so the
  ``FOR NO KEY UPDATE NOWAIT`` runs inside ``bench_lock_rows_nowait()``, a PL/pgSQL function created in the
  benchmark database that catches ``lock_not_available`` and answers -1 (the service: 409 lock_busy). Its
  EXCEPTION block costs a subtransaction the service does not pay;
* ``serializable``: the service's first transaction (READ COMMITTED) only reads the quotes and rolls back
  (``IsolationRequired``); the script does the same, then ``BEGIN ISOLATION LEVEL SERIALIZABLE`` and the
  guarded-update path, with ``--max-tries`` = DB_TRANSIENT_RETRIES + 1 (4): pgbench reruns a script that hit
  40001/40P01 from its first line (so a rerun repeats the cheap READ COMMITTED read, which the service's runner
  skips: it remembers the level) without the service's jittered sleep, and counts the runs that still failed
  after 4 tries (the service: 503 busy);
* multi (3 products, one from each third of the spread range, so distinct and ascending): the cart rule for every
  strategy: advisory keys (advisory only), every row ``FOR NO KEY UPDATE`` (``NOWAIT`` via the function for
  row_lock_nowait) in ascending id, then three guarded UPDATEs; no version check;
* soldout: the quote read sees no stock and the transaction rolls back (the service's early refusal; the
  per-worker sold-out memory that spares most HTTP requests even that read has no SQL equivalent).

Outcomes in pgbench: committed checkouts are counted as the orders that exist afterwards; NOWAIT refusals and
optimistic retries/give-ups by sequences (``nextval`` only on those paths, inside a statement the script sends
anyway); the refusals (409 stock_conflict) are the rest.
"""

import argparse
import functools
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.drivers import audit, run_pgbench, run_wrk
from bench.report import machine_info, server_settings
from bench.sampling import wait_for_quiet
from bench.seeding import HOT, SOLD_OUT, SPREAD_COUNT, SPREAD_FIRST, seed
from bench.tools import ensure_tools
from devtools.processes import RESULTS, ROOT, Gunicorn, log, setup_django_quietly
from devtools.processes import server_url as db_url

STRATEGIES = ["guarded_update", "row_lock", "row_lock_nowait", "optimistic", "advisory", "serializable"]
SCENARIOS = ["hot", "spread", "multi", "soldout"]
DOCS = ROOT / "docs" / "strategies.md"
FALLBACK = RESULTS / "strategies.md"
MARK_START, MARK_END = "<!-- strategies:begin -->", "<!-- strategies:end -->"

# The service's settings these scripts mirror (skincare/settings.py defaults).
OPTIMISTIC_ATTEMPTS = 5  # INVENTORY_OPTIMISTIC_ATTEMPTS
SERIALIZABLE_TRIES = 4  # DB_TRANSIENT_RETRIES (3) + 1
TTL_SECONDS = 1800  # RESERVATION_TTL_SECONDS

SEQUENCES = ("bench_sql_lock_busy", "bench_sql_version_lost", "bench_sql_gave_up")
SQL_SETUP = """
CREATE SEQUENCE IF NOT EXISTS bench_sql_lock_busy;
CREATE SEQUENCE IF NOT EXISTS bench_sql_version_lost;
CREATE SEQUENCE IF NOT EXISTS bench_sql_gave_up;
CREATE OR REPLACE FUNCTION bench_lock_rows_nowait(ids bigint[]) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    short integer;
BEGIN
    -- inventory.reserve._lock_rows(nowait=True): the rows in ascending id, NOWAIT; returns how many are short
    SELECT count(*) FILTER (WHERE locked.available_stock < 1) INTO short
    FROM (SELECT available_stock FROM stock_buckets WHERE product_id = ANY(ids) AND bucket = 0
          ORDER BY product_id FOR NO KEY UPDATE NOWAIT) AS locked;
    RETURN short;
EXCEPTION WHEN lock_not_available THEN
    PERFORM nextval('bench_sql_lock_busy');  -- a sequence: the count survives the subtransaction's rollback
    RETURN -1;
END
$$;
"""


def _products(scenario: str) -> tuple[list[str], list[str]]:
    """The ``\\set`` lines choosing the products of one checkout, and their variable names (ascending ids)."""
    if scenario == "multi":
        third = SPREAD_COUNT // 3
        bounds = [SPREAD_FIRST, SPREAD_FIRST + third, SPREAD_FIRST + 2 * third, SPREAD_FIRST + SPREAD_COUNT]
        lines = [f"\\set p{i + 1} random({bounds[i]}, {bounds[i + 1] - 1})" for i in range(3)]
        return lines, ["p1", "p2", "p3"]
    if scenario == "spread":
        return [f"\\set p1 random({SPREAD_FIRST}, {SPREAD_FIRST + SPREAD_COUNT - 1})"], ["p1"]
    return [f"\\set p1 {SOLD_OUT if scenario == 'soldout' else HOT}"], ["p1"]


@functools.cache
def service_sql() -> dict[str, Any]:
    """The service's own statement texts and constants (importing them needs Django's apps loaded)."""
    from django.apps import apps

    if not apps.ready:  # a bench process of its own (in a test run Django is set up already: leave its environment)
        os.environ.setdefault("DJANGO_DEV_INSECURE_SECRET_KEY", "true")  # reading constants: no secret is used
        setup_django_quietly()
    from inventory.reserve import RESERVE_AT_VERSION_SQL, RESERVE_SQL
    from payments.checkout import ORDER_SQL, ORDER_SQL_CONSTANTS, QUOTES_SQL
    from skincare.locks import advisory_key

    return {
        "QUOTES_SQL": QUOTES_SQL,
        "ORDER_SQL": ORDER_SQL,
        "ORDER_SQL_CONSTANTS": ORDER_SQL_CONSTANTS,
        "RESERVE_SQL": RESERVE_SQL,
        "RESERVE_AT_VERSION_SQL": RESERVE_AT_VERSION_SQL,
        "PRODUCT_KEY_BASE": advisory_key("inventory_product", 1) - 1,  # + product id
        "CUSTOMER_KEY_BASE": advisory_key("customer_checkout", 1) - 1,  # + customer id
    }


def pgbench_sql(sql: str, **values: str) -> str:
    """One of the service's statements as pgbench runs it: each ``%(name)s`` parameter replaced by the pgbench
    expression given for it (a missing one is an error, so the script cannot drift from the service's text)."""
    return re.sub(r"%\((\w+)\)s", lambda m: values[m.group(1)], sql).strip()


def _array(items: list[str]) -> str:
    return f"ARRAY[{', '.join(items)}]"  # the statements cast their array parameters themselves


def quote_read(pids: list[str]) -> str:
    """payments.checkout.QUOTES_SQL, folded into one row for \\gset (its columns by name). Every order is placed by
    one bench customer; its checkout-lock key is drawn per transaction (``:lockkey``), as for distinct customers."""
    cols = ", ".join(
        f"max(q.price) FILTER (WHERE q.id = :{p}) AS price{i}, max(q.version_sum) FILTER (WHERE q.id = :{p}) AS seen{i}"
        for i, p in enumerate(pids, 1)
    )
    quotes = pgbench_sql(
        service_sql()["QUOTES_SQL"],
        customer_lock=":lockkey",
        product_ids=_array([f":{p}" for p in pids]) + "::bigint[]",
    )
    return f"SELECT min(q.available) AS avail, sum(q.price) AS total, {cols}\nFROM ({quotes}) AS q \\gset"


def order_insert(pids: list[str]) -> str:
    """payments.checkout.ORDER_SQL: the order, its lines, reservations and payment attempt; ``\\gset o_`` keeps the
    order id as ``:o_id`` (the reserve statements name it in their ledger rows)."""
    constants = {name: f"'{value}'" for name, value in service_sql()["ORDER_SQL_CONSTANTS"].items()}
    return (
        pgbench_sql(
            service_sql()["ORDER_SQL"],
            **constants,
            customer_id=":cust",
            ttl_seconds=str(TTL_SECONDS),
            total=":total",
            product_ids=_array([f":{p}" for p in pids]),
            qtys=_array(["1" for _ in pids]),
            prices=_array([f":price{i}" for i in range(1, len(pids) + 1)]),
            limited_ids="ARRAY[]::bigint[]",
            max_pending="0",
        )
        + " \\gset o_"
    )


def _reserve_sql(pid: str, *, seen: str | None = None) -> str:
    """inventory.reserve.RESERVE_SQL on bucket 0 (RESERVE_AT_VERSION_SQL with ``seen``) for one unit of ``:pid`` in
    the order ``:o_id``; it answers the bucket taken, or no row."""
    params = {"qty": "1", "product_id": f":{pid}", "bucket": "0", "order_id": ":o_id"}
    if seen:
        return pgbench_sql(service_sql()["RESERVE_AT_VERSION_SQL"], **params, version=f":{seen}")
    return pgbench_sql(service_sql()["RESERVE_SQL"], **params)


def _guarded_update(pid: str, *, seen: str | None = None) -> list[str]:
    """The reserve statement every strategy ends with; ``:bucket`` is the bucket taken, -1 when it took none
    (``\\aset`` sets it only when a row comes back)."""
    return ["\\set bucket -1", f"{_reserve_sql(pid, seen=seen)} \\aset"]


def _lock_rows(pids: list[str], *, nowait: bool) -> str:
    """inventory.reserve._lock_rows: every row of the cart FOR NO KEY UPDATE in ascending id; \\gset ``short``
    (rows short of stock; -1 when NOWAIT found a row busy)."""
    ids = ", ".join(f":{p}" for p in pids)
    if nowait:
        return f"SELECT bench_lock_rows_nowait(ARRAY[{ids}]::bigint[]) AS short \\gset"
    return (
        "SELECT count(*) FILTER (WHERE locked.available_stock < 1) AS short FROM (SELECT available_stock "
        f"FROM stock_buckets WHERE product_id IN ({ids}) AND bucket = 0 ORDER BY product_id FOR NO KEY UPDATE) AS locked \\gset"
    )


def _reserve(strategy: str, pids: list[str], attempt: int = 1) -> list[str]:
    """The statements after the order's INSERT up to COMMIT/ROLLBACK, for ``strategy`` (stock_reserve)."""
    if strategy == "advisory":
        keys = [f"\\set key{i} {service_sql()['PRODUCT_KEY_BASE']} + :{p}" for i, p in enumerate(pids, 1)]
        locks = [f"SELECT pg_advisory_xact_lock(:key{i});" for i in range(1, len(pids) + 1)]
        head = keys + locks
    else:
        head = []
    if len(pids) > 1 or strategy in ("row_lock", "row_lock_nowait"):
        # the cart rule (every strategy), or a single row_lock/row_lock_nowait product: lock, check, update
        nowait = strategy == "row_lock_nowait"
        updates = [_reserve_sql(p) + ";" for p in pids]
        return [*head, _lock_rows(pids, nowait=nowait), "\\if :short = 0", *updates, "COMMIT;", "\\else",
                "ROLLBACK;", "\\endif"]  # fmt: skip
    (pid,) = pids
    if strategy != "optimistic":
        return [*head, *_guarded_update(pid), "\\if :bucket >= 0", "COMMIT;", "\\else", "ROLLBACK;", "\\endif"]
    # optimistic: a lost version check reruns the whole transaction (skincare.db.retry_transient), jittered
    last = attempt == OPTIMISTIC_ATTEMPTS
    lost = "bench_sql_gave_up" if last else "bench_sql_version_lost"
    retry = (
        []
        if last
        else [
            f"\\set backoff random(0, {10_000 * attempt})",
            "\\sleep :backoff us",
            *_attempt(strategy, pids, attempt + 1),
        ]
    )
    # a lost check counts itself in ``lost`` (after the ROLLBACK: a sequence is not transactional)
    return [*_guarded_update(pid, seen="seen1"), "\\if :bucket >= 0", "COMMIT;", "\\else", "ROLLBACK;",
            f"SELECT nextval('{lost}');", *retry, "\\endif"]  # fmt: skip


def _attempt(strategy: str, pids: list[str], attempt: int = 1) -> list[str]:
    """One checkout transaction: quote read, early refusal, the order's INSERT, the strategy's reservation."""
    begin = "BEGIN ISOLATION LEVEL SERIALIZABLE;" if strategy == "serializable" else "BEGIN;"
    return [begin, quote_read(pids), "\\if :avail >= 1", order_insert(pids), *_reserve(strategy, pids, attempt),
            "\\else", "ROLLBACK;", "\\endif"]  # fmt: skip


def pgbench_script(strategy: str, scenario: str, customer_id: int) -> str:
    """The pgbench script of one (strategy, scenario) cell: one checkout per run, as the service sends it."""
    choose, pids = _products(scenario)
    body = _attempt(strategy, pids)
    if strategy == "serializable":
        # the first transaction (READ COMMITTED) reads the quotes, finds a serializable product and rolls back
        # before writing anything; a product seen short is refused there, at READ COMMITTED
        body = ["BEGIN;", quote_read(pids), "\\if :avail >= 1", "ROLLBACK;", *body, "\\else", "ROLLBACK;", "\\endif"]
    lockkey = f"\\set lockkey {service_sql()['CUSTOMER_KEY_BASE']} + random(1, 1000000000)"
    return "\n".join([*choose, f"\\set cust {customer_id}", lockkey, *body]) + "\n"


def pgbench_args(strategy: str) -> list[str]:
    return ["--failures-detailed", f"--max-tries={SERIALIZABLE_TRIES}"] if strategy == "serializable" else []


def _connect(url: str) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True)


def prepare_database(url: str) -> None:
    """The NOWAIT helper function and the outcome sequences (idempotent; the benchmark database is throwaway)."""
    with _connect(url) as conn:
        conn.execute(SQL_SETUP)


def set_strategy(url: str, strategy: str) -> int:
    """Every benchmark product (hot, spread, sold-out) to ``strategy``; returns the number of products changed."""
    ids = [HOT, SOLD_OUT, *range(SPREAD_FIRST, SPREAD_FIRST + SPREAD_COUNT)]
    with _connect(url) as conn:
        cur = conn.execute(
            "UPDATE products SET inventory_strategy = %s, updated_at = now() WHERE id = ANY(%s)", [strategy, ids]
        )
        if cur.rowcount != len(ids):
            raise SystemExit(f"set {strategy}: {cur.rowcount} of {len(ids)} benchmark products found")
        return cur.rowcount


def counters(url: str, sequences: Sequence[str] = SEQUENCES) -> dict[str, int]:
    """Orders so far (max id) and the outcome sequences' values."""
    with _connect(url) as conn:
        out = {"max_order_id": conn.execute("SELECT COALESCE(max(id), 0) FROM orders").fetchone()[0]}
        for seq in sequences:
            out[seq] = conn.execute(f"SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {seq}").fetchone()[0]
    return out


def reset_counters(url: str, sequences: Sequence[str] = SEQUENCES) -> dict[str, int]:
    with _connect(url) as conn:
        for seq in sequences:
            conn.execute(f"SELECT setval('{seq}', 1, false)")
    return counters(url, sequences)


def run_pgbench_cell(
    url: str, strategy: str, scenario: str, *, duration: int, connections: int, customer_id: int
) -> dict[str, Any]:
    """One pgbench cell, with its outcomes: committed checkouts, refusals, NOWAIT refusals, optimistic retries."""
    before = reset_counters(url)
    r = run_pgbench(
        url,
        f"strategy-{strategy}-{scenario}",
        duration=duration,
        connections=connections,
        customer_id=customer_id,
        script_text=pgbench_script(strategy, scenario, customer_id),
        extra_args=pgbench_args(strategy),
    )
    with _connect(url) as conn:
        committed = conn.execute("SELECT count(*) FROM orders WHERE id > %s", [before["max_order_id"]]).fetchone()[0]
    after = counters(url)
    lock_busy = after["bench_sql_lock_busy"]
    gave_up = after["bench_sql_gave_up"]
    seconds = r["seconds"] or duration
    r.update(
        committed=committed,
        lock_busy=lock_busy,
        version_reruns=after["bench_sql_version_lost"],  # lost version checks that reran the transaction
        gave_up=gave_up,
        refused=max(0, r["processed"] - committed - lock_busy - gave_up),
    )
    r["ok_per_s"] = round(committed / seconds, 1)
    r["conflicts_per_s"] = round(r["refused"] / seconds, 1)
    return r


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.strategies")
    parser.add_argument("--duration", type=int, default=6, help="seconds per cell (default 6)")
    parser.add_argument("--connections", type=int, default=16, help="wrk connections and pgbench clients")
    parser.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated, default all six")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated: " + ",".join(SCENARIOS))
    parser.add_argument("--drivers", default="http,pgbench", help="http, pgbench or both (default)")
    parser.add_argument(
        "--workers", type=int, default=int(os.environ.get("WEB_CONCURRENCY", (os.cpu_count() or 2) + 1))
    )
    parser.add_argument("--quiet-wait", type=int, default=3, help="max seconds to wait for an idle machine per cell")
    parser.add_argument("--dbname", default="skincare_bench", help="benchmark database (dropped and re-created)")
    parser.add_argument("--no-docs", action="store_true", help="write the table to bench-results/strategies.md only")
    args = parser.parse_args(argv)
    for name, allowed in (("strategies", STRATEGIES), ("scenarios", SCENARIOS), ("drivers", ["http", "pgbench"])):
        unknown = set(getattr(args, name).split(",")) - set(allowed)
        if unknown:
            parser.error(f"unknown {name}: {', '.join(sorted(unknown))} (known: {', '.join(allowed)})")
    return args


def _http_unexpected_5xx(strategy: str, r: dict[str, Any]) -> int:
    """5xx that are bugs: every 5xx but serializable's documented 503 busy (its retries ran out)."""
    return r["status_5xx"] - (r["status_503_busy"] if strategy == "serializable" else 0)


def run_matrix(url: str, tokens_file: Path, customer_id: int, args: argparse.Namespace) -> int:
    """The matrix on the seeded database at ``url``: bench-results/strategies.json and the table (printed, and
    written to docs/strategies.md unless --no-docs). Exit code 1 on a failed audit or an unexpected 5xx."""
    strategies = args.strategies.split(",")
    scenarios = args.scenarios.split(",")
    drivers = args.drivers.split(",")
    t0 = time.monotonic()
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    prepare_database(url)
    report: dict[str, Any] = {
        "started": started,
        "duration_s": args.duration,
        "connections": args.connections,
        "gunicorn": "",
        "strategies": {},
    }
    server = None
    if "http" in drivers:
        server = Gunicorn(url, workers=args.workers).start()
        report["gunicorn"] = server.describe()
        log(f"strategy matrix: gunicorn on {server.base}: {server.describe()}")
    try:
        if server:
            run_wrk(server.base, "spread", duration=2, connections=args.connections, tokens_file=tokens_file,
                    workers=server.worker_pids())  # fmt: skip  # warm-up
        for strategy in strategies:
            set_strategy(url, strategy)
            cells: dict[str, dict[str, Any]] = {}
            for scenario in scenarios:
                cell: dict[str, Any] = {}
                if server:
                    wait_for_quiet(args.quiet_wait)
                    r = run_wrk(server.base, scenario, duration=args.duration, connections=args.connections,
                                tokens_file=tokens_file, workers=server.worker_pids())  # fmt: skip
                    cell["http"] = r
                    log(
                        f"{strategy:>15} {scenario:>7} HTTP:    {r['ok_per_s']:7.1f} 201/s {r['conflicts_per_s']:7.1f} 409/s "
                        f"p99 {r['p99_ms']:.1f} ms, lock_busy {r['status_409_lock_busy']}, gave up "
                        f"{r['status_409_gave_up']}, 503 busy {r['status_503_busy']}, 5xx {r['status_5xx']}, other "
                        f"{r['status_4xx_other'] + r['socket_errors']}"
                    )
                if "pgbench" in drivers:
                    wait_for_quiet(args.quiet_wait)
                    r = run_pgbench_cell(url, strategy, scenario, duration=args.duration,
                                         connections=args.connections, customer_id=customer_id)  # fmt: skip
                    cell["pgbench"] = r
                    log(
                        f"{strategy:>15} {scenario:>7} pgbench: {r['ok_per_s']:7.1f} ok/s {r['conflicts_per_s']:7.1f} "
                        f"refused/s ({r['rps']:.1f} tx/s) p99 {r['p99_ms']} ms, lock_busy {r['lock_busy']}, version "
                        f"reruns {r['version_reruns']} (gave up {r['gave_up']}), serialization reruns {r['retries']}, "
                        f"failed {r['failed']}"
                    )
                cells[scenario] = cell
            clean = audit(url)
            log(f"{strategy}: audit_inventory {'clean' if clean else 'FAILED'}")
            report["strategies"][strategy] = {"audit_clean": clean, "cells": cells}
    finally:
        if server:
            errors = server.errors_in_log()
            server.stop()
            report["gunicorn_errors"] = errors[:20]
            if errors:
                log(f"gunicorn logged {len(errors)} error lines, e.g. {errors[0]}")
    report["wall_seconds"] = round(time.monotonic() - t0)
    report["server_settings"] = server_settings(url)
    report["machine"] = machine_info()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "strategies.json").write_text(json.dumps(report, indent=2))
    table = markdown(report, scenarios)
    print("\n" + table)
    write_table(table, docs=not args.no_docs)
    unexpected = sum(
        _http_unexpected_5xx(s, cell["http"])
        for s, row in report["strategies"].items()
        for cell in row["cells"].values()
        if "http" in cell
    )
    audits_clean = all(row["audit_clean"] for row in report["strategies"].values())
    return 0 if audits_clean and not unexpected else 1


def _http_cell(strategy: str, scenario: str, r: dict[str, Any]) -> str:
    value = r["conflicts_per_s"] if scenario == "soldout" else r["ok_per_s"]
    extra = []
    for count, label in (
        (r["status_409_lock_busy"], "409 lock_busy"),
        (r["status_409_gave_up"], "409 gave up"),
        (r["status_503_busy"], "503 busy"),
        (r["status_5xx"] - r["status_503_busy"], "**other 5xx**"),
        (r["status_4xx_other"] + r["socket_errors"], "other"),
    ):
        if count:
            extra.append(f"{count} {label}")
    stock_conflicts = r["status_409"] - r["status_409_lock_busy"] - r["status_409_gave_up"]
    if scenario != "soldout" and stock_conflicts:
        extra.append(f"{stock_conflicts} 409 stock_conflict")
    return f"{value:.0f}/s, p99 {r['p99_ms']:.0f}" + ("; " + ", ".join(extra) if extra else "")


def _pgbench_cell(scenario: str, r: dict[str, Any]) -> str:
    value = r["conflicts_per_s"] if scenario == "soldout" else r["ok_per_s"]
    extra = []
    for count, label in (
        (r["lock_busy"], "lock_busy"),
        (r["version_reruns"], "version reruns"),
        (r["gave_up"], "gave up"),
        (r["retries"], "serialization reruns"),
        (r["failed"], "**failed** (retries ran out)"),
        (0 if scenario == "soldout" else r["refused"], "refused"),
    ):
        if count:
            extra.append(f"{count} {label}")
    p99 = "-" if r["p99_ms"] is None else f"{r['p99_ms']:.0f}"
    return f"{value:.0f}/s, p99 {p99}" + ("; " + ", ".join(extra) if extra else "")


def markdown(report: dict[str, Any], scenarios: Sequence[str]) -> str:
    """The strategy table: one row per strategy, an HTTP and a pgbench cell per scenario."""
    rows = report["strategies"]
    drivers = [d for d in ("http", "pgbench") if any(d in c for row in rows.values() for c in row["cells"].values())]
    label = {"http": "HTTP", "pgbench": "pgbench"}
    head = [f"{s} {label[d]}" for s in scenarios for d in drivers]
    lines = [
        f"Run of {report['started']} ({report['duration_s']} s per cell, {report['connections']} wrk connections / "
        f"pgbench clients; gunicorn: {report['gunicorn'] or '-'}; the whole matrix took {report['wall_seconds']} s).",
        "",
        "Each cell: successful checkouts per second (201s; for soldout the 409s), p99 latency in ms, then the other "
        "answers of the run, counted. pgbench runs the statements the service sends for that strategy "
        "(bench/strategies.py): *lock_busy* = NOWAIT found the row taken (HTTP 409 lock_busy), *version reruns* / "
        "*gave up* = optimistic check lost and reran / gave up after 5 (HTTP 409 with gave_up_after), "
        "*serialization reruns* / *failed* = 40001 retried by pgbench --max-tries=4 / still failing (HTTP 503 busy).",
        "",
        "| strategy | " + " | ".join(head) + " | audit |",
        "|---|" + "---:|" * len(head) + "---|",
    ]
    for strategy, row in rows.items():
        cells = []
        for scenario in scenarios:
            cell = row["cells"].get(scenario, {})
            for d in drivers:
                if d not in cell:
                    cells.append("-")
                elif d == "http":
                    cells.append(_http_cell(strategy, scenario, cell[d]))
                else:
                    cells.append(_pgbench_cell(scenario, cell[d]))
        lines.append(f"| `{strategy}` | " + " | ".join(cells) + f" | {'clean' if row['audit_clean'] else 'FAILED'} |")
    http = [(s, c["http"]) for s, row in rows.items() for c in row["cells"].values() if "http" in c]
    five = sum(r["status_5xx"] for _, r in http)
    unexpected = sum(_http_unexpected_5xx(s, r) for s, r in http)
    lines += [
        "",
        f"HTTP 5xx: {five} ({five - unexpected} of them serializable's documented 503 busy; unexpected: {unexpected}); "
        f"audit after every strategy: {'clean' if all(r['audit_clean'] for r in rows.values()) else 'FAILED'}.",
    ]
    return "\n".join(lines)


def write_table(table: str, *, docs: bool) -> Path:
    """Into docs/strategies.md between the markers (only if that file exists and ``docs``), else
    bench-results/strategies.md. Returns the path written."""
    if docs and DOCS.exists():
        text = DOCS.read_text()
        if MARK_START not in text:
            text = text.rstrip("\n") + f"\n\n{MARK_START}\n{MARK_END}\n"
        head, _, rest = text.partition(MARK_START)
        _, _, tail = rest.partition(MARK_END)
        DOCS.write_text(f"{head}{MARK_START}\n{table}\n{MARK_END}{tail}")
        path = DOCS
    else:
        FALLBACK.parent.mkdir(exist_ok=True)
        FALLBACK.write_text(table + "\n")
        path = FALLBACK
    log(f"strategy table written to {path.relative_to(ROOT)}")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    RESULTS.mkdir(exist_ok=True)
    ensure_tools()
    url = db_url(args.dbname)
    tokens_file, customer_id = seed(url)
    return run_matrix(url, tokens_file, customer_id, args)


if __name__ == "__main__":
    sys.exit(main())
