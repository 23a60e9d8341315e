"""WAL written and HOT updates per checkout (issue 26): the service's checkout statements beside the seed's
transaction, in pgbench on the benchmark database, with the stock rows' table at each fillfactor asked for.

Subjects (each one checkout per pgbench transaction, ``-M prepared`` unless ``--mode``):

* ``seed-hot`` / ``seed-spread``: the seed's transaction (bench.drivers.pgbench_script, ``limit-hot-seed-order`` and
  ``limit-spread``), the fixed reference;
* ``service-hot`` / ``service-spread``: the service's own statements for a ``guarded_update`` product (quote read,
  the one INSERT statement, the guarded UPDATE; bench.strategies.pgbench_script).

For each fillfactor: ``ALTER TABLE stock_buckets SET (fillfactor = F)`` and ``VACUUM FULL stock_buckets`` (the
existing rows rewritten with it); then, in rounds that alternate the order of the fillfactors and of the subjects,
each cell starts after a ``CHECKPOINT`` (so every cell pays the same full-page images of the pages it touches
first) and reads, before and after the run, ``pg_current_wal_lsn()``, ``pg_stat_wal`` (records, full-page images)
and ``pg_stat_user_tables`` for ``stock_buckets`` (``n_tup_upd``, ``n_tup_hot_upd``). Reported per checkout (the
orders the cell committed): WAL bytes, WAL records, full-page images, and the share of stock-row updates that were
HOT; and PostgreSQL CPU per checkout (bench.drivers' per-process reading). Medians over the rounds; the service's
WAL over the seed's of the same fillfactor and round. Writes bench-results/wal.json, prints the markdown table and
writes it between the ``wal`` markers of docs/benchmarks.md (``--no-docs``: not). ``make bench`` (bench.run) runs it
last, on the same database (``--no-wal`` skips it).

    python -m bench.wal                       # fresh skincare_bench, fillfactor 100 vs the migration's, 16 clients, 3 rounds
    python -m bench.wal --reuse-db --fillfactors 100,50,20 --clients 64 --duration 6 --rounds 2

The table's fillfactor is then put back to the migration's value (inventory/migrations/0007_*).
"""

import argparse
import importlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench import buckets, drivers, strategies
from bench.report import DOCS, machine_info, server_settings, update_docs
from bench.seeding import seed
from bench.tools import ensure_tools
from devtools.processes import RESULTS, log
from devtools.processes import server_url as db_url

SUBJECTS: dict[str, Callable[[int], str]] = {
    "seed-hot": lambda customer: drivers.pgbench_script("limit-hot-seed-order", customer),
    "service-hot": lambda customer: strategies.pgbench_script("guarded_update", "hot", customer),
    "seed-spread": lambda customer: drivers.pgbench_script("limit-spread", customer),
    "service-spread": lambda customer: strategies.pgbench_script("guarded_update", "spread", customer),
}

MARK_START, MARK_END = "<!-- wal:begin -->", "<!-- wal:end -->"

SNAPSHOT_SQL = """
SELECT pg_current_wal_lsn()::text, w.wal_records, w.wal_fpi, t.n_tup_upd, t.n_tup_hot_upd,
       (SELECT COALESCE(max(id), 0) FROM orders)
  FROM pg_stat_wal w, pg_stat_user_tables t
 WHERE t.relname = 'stock_buckets'
"""


def _connect(url: str) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True)


def _customer_id(url: str) -> int:
    with _connect(url) as conn:
        return int(conn.execute("SELECT id FROM auth_user WHERE username = 'bench-customer-00000'").fetchone()[0])


def migration_fillfactor() -> int:
    return int(importlib.import_module("inventory.migrations.0007_stock_buckets_fillfactor").FILLFACTOR)


def set_fillfactor(url: str, fillfactor: int) -> None:
    with _connect(url) as conn:
        conn.execute(f"ALTER TABLE stock_buckets SET (fillfactor = {int(fillfactor)})")
        conn.execute("VACUUM FULL stock_buckets")


def _snapshot(conn: Any) -> tuple[Any, ...]:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return conn.execute(SNAPSHOT_SQL).fetchone()


def run_cell(
    url: str, subject: str, *, fillfactor: int, clients: int, duration: int, customer_id: int, mode: str
) -> dict[str, Any]:
    with _connect(url) as conn:
        conn.execute("CHECKPOINT")
        lsn0, rec0, fpi0, upd0, hot0, order0 = _snapshot(conn)
    r = drivers.run_pgbench(
        url,
        f"wal-{subject}",
        duration=duration,
        connections=clients,
        customer_id=customer_id,
        script_text=SUBJECTS[subject](customer_id),
        query_mode=mode,
    )
    buckets.wait_for_backends_gone()  # each backend flushes its statistics when it exits
    with _connect(url) as conn:
        lsn1, rec1, fpi1, upd1, hot1, _ = _snapshot(conn)
        wal = conn.execute("SELECT pg_wal_lsn_diff(%s, %s)", [lsn1, lsn0]).fetchone()[0]
        checkouts = conn.execute("SELECT count(*) FROM orders WHERE id > %s", [order0]).fetchone()[0]
    updates = upd1 - upd0
    n = max(checkouts, 1)
    return {
        "subject": subject,
        "fillfactor": fillfactor,
        "clients": clients,
        "mode": mode,
        "checkouts": checkouts,
        "checkouts_per_s": round(checkouts / duration, 1),
        "wal_bytes_per_checkout": round(float(wal) / n, 1),
        "wal_records_per_checkout": round((rec1 - rec0) / n, 2),
        "wal_fpi_per_checkout": round((fpi1 - fpi0) / n, 3),
        "stock_updates": updates,
        "hot_share": round((hot1 - hot0) / updates, 4) if updates else None,
        "pg_cpu_ms_per_checkout": r["cpu_ms_per_request"],
        "failed": r["failed"],
    }


def run(url: str, customer_id: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    cells = []
    for rnd in range(args.rounds):
        fillfactors = args.fillfactors if rnd % 2 == 0 else args.fillfactors[::-1]
        for fillfactor in fillfactors:
            set_fillfactor(url, fillfactor)
            subjects = args.subjects if rnd % 2 == 0 else args.subjects[::-1]
            for subject in subjects:
                cell = run_cell(
                    url,
                    subject,
                    fillfactor=fillfactor,
                    clients=args.clients,
                    duration=args.duration,
                    customer_id=customer_id,
                    mode=args.mode,
                )
                cell["round"] = rnd
                log(
                    f"round {rnd} fillfactor {fillfactor} {subject}: {cell['checkouts_per_s']}/s, "
                    f"{cell['wal_bytes_per_checkout']} WAL bytes, HOT {cell['hot_share']}, "
                    f"{cell['pg_cpu_ms_per_checkout']} ms PG CPU per checkout"
                )
                cells.append(cell)
    set_fillfactor(url, migration_fillfactor())
    return cells


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summary(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Medians per (fillfactor, subject), and the service's WAL per checkout over the seed's of the same round."""
    rows = []
    for fillfactor in dict.fromkeys(c["fillfactor"] for c in cells):
        for subject in dict.fromkeys(c["subject"] for c in cells):
            mine = [c for c in cells if c["fillfactor"] == fillfactor and c["subject"] == subject]
            if not mine:
                continue
            ratios = []
            if subject.startswith("service-"):
                seed_subject = subject.replace("service-", "seed-")
                for c in mine:
                    ref = [
                        s
                        for s in cells
                        if s["round"] == c["round"] and s["fillfactor"] == fillfactor and s["subject"] == seed_subject
                    ]
                    if ref:
                        ratios.append(c["wal_bytes_per_checkout"] / ref[0]["wal_bytes_per_checkout"])
            row: dict[str, Any] = {"fillfactor": fillfactor, "subject": subject, "rounds": len(mine)}
            for key in (
                "checkouts_per_s",
                "wal_bytes_per_checkout",
                "wal_records_per_checkout",
                "wal_fpi_per_checkout",
                "hot_share",
                "pg_cpu_ms_per_checkout",
            ):
                row[key] = _median([c[key] for c in mine])
            row["wal_vs_seed"] = round(statistics.median(ratios), 2) if ratios else None
            rows.append(row)
    return rows


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def markdown(report: dict[str, Any]) -> str:
    args = report["args"]
    lines = [
        f"`{report['command']}` ({report['started']}, pgbench `-M {args['mode']} -j 2 -c {args['clients']}`, "
        f"{args['duration']} s per cell, {args['rounds']} rounds alternating the order; medians; machine shared "
        f"with other jobs, load before {report['load_before']}):",
        "",
        "| fillfactor | subject | checkouts/s | WAL bytes / checkout | WAL records | full-page images | HOT share of "
        "stock-row updates | PostgreSQL CPU ms / checkout | WAL vs seed |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report["summary"]:
        hot = None if row["hot_share"] is None else 100 * row["hot_share"]
        lines.append(
            f"| {row['fillfactor']} | {row['subject']} | {_fmt(row['checkouts_per_s'], '.0f')} | "
            f"{_fmt(row['wal_bytes_per_checkout'], ',.0f')} | {_fmt(row['wal_records_per_checkout'], '.1f')} | "
            f"{_fmt(row['wal_fpi_per_checkout'], '.3f')} | {_fmt(hot, '.1f')}{'' if hot is None else ' %'} | "
            f"{_fmt(row['pg_cpu_ms_per_checkout'], '.2f')} | {_fmt(row['wal_vs_seed'], '.2f')} |"
        )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.wal")
    parser.add_argument("--duration", type=int, default=8, help="seconds per cell (default 8)")
    parser.add_argument("--clients", type=int, default=16, help="pgbench clients (default 16)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, alternating the order (default 3)")
    parser.add_argument("--fillfactors", help="stock_buckets fillfactors to compare (default: 100 and the migration's)")
    parser.add_argument("--subjects", default=",".join(SUBJECTS), help="comma-separated, default all four")
    parser.add_argument("--mode", default="prepared", choices=["prepared", "simple", "extended"], help="pgbench -M")
    parser.add_argument("--dbname", default="skincare_bench", help="benchmark database (dropped and re-created)")
    parser.add_argument("--reuse-db", action="store_true", help="use the seeded benchmark database as it is")
    parser.add_argument("--no-docs", action="store_true", help="do not touch docs/ (results in bench-results/)")
    args = parser.parse_args(argv)
    args.fillfactors = (
        [int(f) for f in args.fillfactors.split(",")] if args.fillfactors else [100, migration_fillfactor()]
    )
    args.subjects = args.subjects.split(",")
    unknown = set(args.subjects) - set(SUBJECTS)
    if unknown:
        parser.error(f"unknown subjects: {sorted(unknown)}")
    return args


def run_report(url: str, customer_id: int, args: argparse.Namespace, *, command: str) -> int:
    """Everything on the seeded database at ``url``: bench-results/wal.json, the table printed and written between
    the ``wal`` markers of docs/benchmarks.md (unless ``--no-docs``). Exit code 1 on a failed audit or pgbench."""
    report: dict[str, Any] = {
        "command": command,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load_before": ", ".join(f"{v:.1f}" for v in os.getloadavg()),
        "args": {k: v for k, v in vars(args).items() if k != "reuse_db"},
    }
    report["cells"] = run(url, customer_id, args)
    report["summary"] = summary(report["cells"])
    report["audit_clean"] = drivers.audit(url)
    report["server_settings"] = server_settings(url)
    report["machine"] = machine_info()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "wal.json").write_text(json.dumps(report, indent=2))
    block = markdown(report)
    print("\n" + block)
    if not args.no_docs:
        update_docs(block, DOCS, start=MARK_START, end=MARK_END)
    log(f"audit_inventory: {'clean' if report['audit_clean'] else 'FAILED'}")
    return 0 if report["audit_clean"] and not any(c["failed"] for c in report["cells"]) else 1


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    RESULTS.mkdir(exist_ok=True)
    ensure_tools()
    url = db_url(args.dbname)
    customer_id = _customer_id(url) if args.reuse_db else seed(url)[1]
    command = "python -m bench.wal" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    return run_report(url, customer_id, args, command=command)


if __name__ == "__main__":
    sys.exit(main())
