"""``make bench``: the throughput benchmark, in ONE run on ONE database (skincare_bench, created afresh).

1. The limit: pgbench runs the checkout transaction as raw SQL on the project's real tables (the same statements
   the service sends: product/price read, order, order line, reservation, payment attempt, ledger row, guarded
   inventory UPDATE last), at the same concurrency as the HTTP runs: hot (one product) and spread (1000
   products); plus the seed's statement order (guarded UPDATE right after the order insert) on the hot product.
2. The stack: wrk + bench/checkout.lua through gunicorn: hot SKU, spread SKUs, multi-item carts (3 products),
   a sold-out flood (stock 0, every answer a 409) and GET /healthz (the baseline for the sold-out flood).

3. The inventory-strategy matrix (bench.strategies): each strategy x {hot, spread, multi, soldout}, through HTTP
   and as raw SQL in pgbench, on the same database (``--no-strategies`` skips it; ``--only`` and ``--matrix``
   runs never include it).
4. Stock buckets (bench.buckets): the hot product with K = 1, 4, 8, 16 buckets at 16/64/256 pgbench clients beside
   spread and the seed's transaction, PostgreSQL CPU per checkout with -M prepared/simple, and HTTP with K = 1 and 8,
   on the same database (``--no-buckets`` skips it; ``--only`` and ``--matrix`` runs never include it).
5. WAL and HOT (bench.wal): WAL bytes and the HOT share of stock-row updates per checkout, the service's statements
   beside the seed's transaction, at fillfactor 100 and the migration's (``--no-wal`` skips it).

After every run: ``manage.py audit_inventory``. Reported: successful reservations/s, 409s/s, p50/p95/p99,
errors, CPU and peak RSS per gunicorn worker (psutil), PostgreSQL CPU, the stack/limit ratios.
Writes bench-results/bench.json, docs/img/bench.png, and the results block of docs/benchmarks.md; the matrix
writes bench-results/strategies.json and its block of docs/strategies.md.

    python -m bench.run                       # the full run (about 4 minutes, then about 7 for the strategy matrix)
    python -m bench.run --no-strategies       # without the strategy matrix
    python -m bench.run --no-buckets          # without the stock-bucket runs (about 8 minutes)
    python -m bench.run --duration 10 --only hot,soldout,healthz --workers 4 --no-docs
    python -m bench.run --matrix              # the configuration experiments recorded in docs/benchmarks.md
    python -m bench.run --profile             # py-spy on one worker during the hot run

This module is the orchestrator (command line, the suite, the matrix); the parts live beside it:
bench.tools (wrk, matplotlib, py-spy, pgbench's directory), bench.seeding (the data), bench.drivers (pgbench and
wrk runs, the audit), bench.sampling (CPU and memory), bench.profiling (py-spy), bench.report (ratios, markdown,
chart, docs/benchmarks.md), devtools.processes (databases, manage.py, gunicorn).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import buckets, strategies, wal
from bench.drivers import LIMITS, STACK, audit, run_pgbench, run_wrk
from bench.profiling import profile_hot
from bench.report import (
    CHART,
    DOCS,
    chart,
    machine_info,
    markdown,
    matrix_markdown,
    ratios,
    server_settings,
    update_docs,
)
from bench.sampling import wait_for_quiet
from bench.seeding import seed
from bench.tools import ensure_tools
from devtools.processes import RESULTS, ROOT, Gunicorn, django_env, log
from devtools.processes import server_url as db_url

MATRIX = [
    ("sync, 2 workers (= cores)", {"workers": 2}),
    ("sync, 3 workers", {"workers": 3}),
    ("sync, 4 workers", {"workers": 4}),
    ("sync, 5 workers (gunicorn's usual 2 x cores + 1)", {"workers": 5}),
    ("sync, 8 workers", {"workers": 8}),
    ("gthread, 2 workers x 4 threads (keep-alive)", {"workers": 2, "worker_class": "gthread", "threads": 4}),
    ("sync, 2 workers, no connection health checks", {"workers": 2, "extra_env": {"DB_CONN_HEALTH_CHECKS": "false"}}),
    ("sync, 3 workers, no connection health checks", {"workers": 3, "extra_env": {"DB_CONN_HEALTH_CHECKS": "false"}}),
    ("sync, 2 workers, DB_CONN_MAX_AGE=0", {"workers": 2, "conn_max_age": 0}),
]


def run_suite(
    url: str,
    tokens_file: Path,
    customer_id: int,
    *,
    args: argparse.Namespace,
    names: Sequence[str],
    gunicorn_kwargs: dict[str, Any],
    tag: str = "",
) -> tuple[dict[str, dict[str, Any]], str]:
    """The pgbench limits, then the wrk scenarios on one gunicorn (after a warm-up), each followed by the audit;
    returns the results by scenario and the gunicorn description."""
    results = {}
    for name in [n for n in LIMITS if n in names]:
        busy = wait_for_quiet(args.quiet_wait)
        log(f"{name}: pgbench -c {args.connections} -T {args.duration} (machine busy before: {busy:.0f}%)")
        r = run_pgbench(url, name, duration=args.duration, connections=args.connections, customer_id=customer_id)
        r["audit_clean"] = audit(url)
        results[name] = r
        log(
            f"  {r['ok_per_s']:.0f} tx/s, p99 {r['p99_ms']} ms, PostgreSQL CPU {r['postgres_cpu_pct']}%, audit {'clean' if r['audit_clean'] else 'FAILED'}"
        )
    stack = [n for n in STACK if n in names]
    server = None
    if stack:
        server = Gunicorn(url, **gunicorn_kwargs).start()
        log(f"gunicorn {tag}on {server.base}: {server.describe()}")

        def wrk(mode: str, duration: int) -> dict[str, Any]:
            """One wrk run against this server (its worker pids read afresh)."""
            return run_wrk(
                server.base,
                mode,
                duration=duration,
                connections=args.connections,
                tokens_file=tokens_file,
                workers=server.worker_pids(),
            )

        try:
            wrk("spread", 3)  # warm-up
            for name in stack:
                busy = wait_for_quiet(args.quiet_wait)
                r = wrk(name, args.duration)
                r["audit_clean"] = audit(url)
                results[name] = r
                log(
                    f"  {name}: {r['ok_per_s']:.0f} ok/s, {r['conflicts_per_s']:.0f} 409/s, p50 {r['p50_ms']:.1f} p99 {r['p99_ms']:.1f} ms, "
                    f"5xx {r['status_5xx']}, errors {r['socket_errors']}, worker CPU {r['worker_cpu_pct_mean']}%, "
                    f"PG CPU {r['postgres_cpu_pct']}%, other CPU {r['other_cpu_pct']}% (busy before {busy:.0f}%), "
                    f"audit {'clean' if r['audit_clean'] else 'FAILED'}"
                )
            if args.profile:
                log("py-spy on one worker during a hot run")
                results_profile = profile_hot(server, server.base, tokens_file, args.duration, args.connections)
                (RESULTS / "pyspy-hot-summary.json").write_text(json.dumps(results_profile, indent=2))
                for key, pct in results_profile["top_inclusive_pct"][:30]:
                    print(f"    {pct:5.1f}%  {key}")
        finally:
            errors = server.errors_in_log()
            server.stop()
            if errors:
                log(f"gunicorn logged {len(errors)} error lines, e.g. {errors[0]}")
    return results, (server.describe() if server else "")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run")
    parser.add_argument("--duration", type=int, default=15, help="seconds per scenario (default 15)")
    parser.add_argument("--connections", type=int, default=100)
    # One sync worker per core: PostgreSQL and the load generator share these cores, and the matrix measured
    # fewer context switches beating gunicorn's usual 2 x cores + 1 (see docs/benchmarks.md).
    parser.add_argument(
        "--workers", type=int, default=int(os.environ.get("WEB_CONCURRENCY", (os.cpu_count() or 2) + 1))
    )
    parser.add_argument("--worker-class", default=os.environ.get("GUNICORN_WORKER_CLASS", "sync"))
    parser.add_argument("--threads", type=int, default=int(os.environ.get("GUNICORN_THREADS", "1")))
    parser.add_argument("--conn-max-age", type=int, default=int(os.environ.get("DB_CONN_MAX_AGE", "60")))
    parser.add_argument("--only", help="comma-separated scenarios: " + ",".join(LIMITS + STACK))
    parser.add_argument("--matrix", action="store_true", help="run hot/spread/soldout/healthz for each MATRIX config")
    parser.add_argument("--matrix-rows", help="comma-separated MATRIX indexes to run (default: all)")
    parser.add_argument("--profile", action="store_true", help="py-spy on one worker during an extra hot run")
    parser.add_argument("--quiet-wait", type=int, default=20, help="max seconds to wait for an idle machine per run")
    parser.add_argument("--dbname", default="skincare_bench", help="benchmark database (dropped and re-created)")
    parser.add_argument("--no-docs", action="store_true", help="do not touch docs/ (results stay in bench-results/)")
    parser.add_argument(
        "--no-strategies", action="store_true", help="skip the inventory-strategy matrix (bench.strategies)"
    )
    parser.add_argument("--no-buckets", action="store_true", help="skip the stock-bucket runs (bench.buckets)")
    parser.add_argument("--no-wal", action="store_true", help="skip WAL and HOT per checkout (bench.wal)")
    return parser.parse_args(argv)


def run_matrix(url: str, tokens_file: Path, customer_id: int, args: argparse.Namespace) -> int:
    """``--matrix``: the scenarios once per MATRIX configuration; bench-results/bench-matrix.json and a table."""
    names = (args.only or "hot,spread,soldout").split(",")
    rows = []
    picked = [MATRIX[int(i)] for i in args.matrix_rows.split(",")] if args.matrix_rows else MATRIX
    for label, kwargs in picked:
        results, desc = run_suite(
            url, tokens_file, customer_id, args=args, names=names, gunicorn_kwargs=kwargs, tag=f"[{label}] "
        )
        rows.append({"config": label, "gunicorn": desc, "results": results})
    (RESULTS / "bench-matrix.json").write_text(json.dumps(rows, indent=2))
    print("\n" + matrix_markdown(rows, names))
    return 0


def run_once(url: str, tokens_file: Path, customer_id: int, args: argparse.Namespace, started: str) -> int:
    """The benchmark proper: bench-results/bench.json, the results block printed and (unless --no-docs) written to
    docs/benchmarks.md with the chart. Exit code 1 when an audit failed or any run saw a 5xx."""
    names = args.only.split(",") if args.only else LIMITS + STACK
    gunicorn_kwargs = {
        "workers": args.workers,
        "worker_class": args.worker_class,
        "threads": args.threads,
        "conn_max_age": args.conn_max_age,
    }
    results, desc = run_suite(url, tokens_file, customer_id, args=args, names=names, gunicorn_kwargs=gunicorn_kwargs)
    report = {
        "started": started,
        "duration_s": args.duration,
        "connections": args.connections,
        "gunicorn": desc,
        "server_settings": server_settings(url),
        "machine": machine_info(),
        "results": results,
    }
    report["ratios"] = ratios(results)
    (RESULTS / "bench.json").write_text(json.dumps(report, indent=2))
    block = markdown(report)
    print("\n" + block)
    if not args.no_docs:
        chart(report)
        update_docs(block)
        log(f"wrote {DOCS.relative_to(ROOT)} (results block) and {CHART.relative_to(ROOT)}")
    if not args.only:
        cpu_block = run_cpu(url)
        print("\n" + cpu_block)
        if not args.no_docs:
            update_docs(cpu_block, start=CPU_MARK_START, end=CPU_MARK_END)
    clean = all(r["audit_clean"] for r in results.values()) and not sum(r["status_5xx"] for r in results.values())
    return 0 if clean else 1


CPU_MARK_START, CPU_MARK_END = "<!-- cpu:results:start -->", "<!-- cpu:results:end -->"


def run_cpu(url: str) -> str:
    """``python -m bench.cpu`` on the benchmark database (its own child process, the bench environment): Python CPU
    per request in-process for /healthz, a product GET, a sold-out refusal and a checkout; returns its table."""
    log("bench.cpu: Python CPU per request, in-process (7 rounds x 300 requests, interleaved)")
    out = RESULTS / "cpu.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.cpu", "--markdown", "--json", str(out)],
        cwd=ROOT,
        env=django_env(url, LOG_LEVEL="INFO"),  # access lines on, as served
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"bench.cpu failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    return f"`make bench` run of `python -m bench.cpu` ({stamp}, the benchmark database):\n\n{proc.stdout.strip()}"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    RESULTS.mkdir(exist_ok=True)
    ensure_tools(need_pyspy=args.profile)
    url = db_url(args.dbname)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    tokens_file, customer_id = seed(url)
    if args.matrix:
        return run_matrix(url, tokens_file, customer_id, args)
    code = run_once(url, tokens_file, customer_id, args, started)
    if args.only:
        return code
    common = ["--dbname", args.dbname, "--workers", str(args.workers)] + (["--no-docs"] if args.no_docs else [])
    if not args.no_strategies:
        # The strategy matrix, on the same database, with its own defaults (short cells, 16 connections).
        log("inventory-strategy matrix (bench.strategies)")
        code = max(code, strategies.run_matrix(url, tokens_file, customer_id, strategies.parse_args(common)))
    if not args.no_buckets:
        # Stock buckets, on the same database, with its own defaults (8 s cells) and bench.run's HTTP connections.
        log("stock buckets (bench.buckets)")
        bucket_args = buckets.parse_args([*common, "--connections", str(args.connections)])
        code = max(code, buckets.run(url, tokens_file, customer_id, bucket_args, command="make bench"))
    if not args.no_wal:
        # WAL bytes and HOT updates per checkout beside the seed's transaction, at each stock-row fillfactor.
        log("WAL and HOT per checkout (bench.wal)")
        wal_args = wal.parse_args(["--dbname", args.dbname, *(["--no-docs"] if args.no_docs else [])])
        code = max(code, wal.run_report(url, customer_id, wal_args, command="make bench"))
    return code


if __name__ == "__main__":
    sys.exit(main())
