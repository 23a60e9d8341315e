"""The goals of issue 26 (item 6) in ONE run on ONE database, each beside the baseline of the same run.

1. **Through HTTP** (wrk + bench/checkout.lua, ``--connections`` 16, the 200 seeded customers' tokens) against
   gunicorn with ``make run``'s defaults (skincare/gunicorn.conf.py, cores + 1 sync workers, persistent
   connections, Django's INFO access line): hot product, spread over 1,000 products, the sold-out flood and
   ``/healthz``; beside them **the framework's floor** (bench.floor: the same gunicorn configuration serving a
   minimal Django view that runs the seed's transaction with one cursor) hot and spread; and **the seed's
   transaction in pgbench** ``-M prepared`` at the same 16 clients, hot and spread (bench.drivers'
   ``limit-hot-seed-order`` and ``limit-spread``, the limit cells of ``make bench``). These cells run in
   ``--rounds`` rounds, every other one in reverse order (A B … B A …), medians reported with each round's ratio.
   PostgreSQL CPU per checkout is every PostgreSQL process's CPU over the cell (bench.sampling, from /proc)
   divided by the checkouts committed in it, the same way for wrk and for pgbench.
2. **The service's statements in pgbench** (bench.buckets' cells, called, not copied): the hot product in K = 16
   buckets at 64 and 256 clients, one row (K = 1) at 64, spread at 64 and 256; ``--bucket-rounds`` rounds,
   alternating the order. The gunicorns are stopped first (bench.buckets waits for idle connections to leave).
3. **In-process Python CPU** (``python -m bench.cpu`` through bench.run's ``run_cpu``, on the same database).

``manage.py audit_inventory`` after every round and at the end (exit code 1 when it fails, or on a 5xx, a socket
error or a pgbench failure). Writes bench-results/goals.json and the block between the ``goals`` markers of
docs/benchmarks.md (the subsection "The goals of issue 26, in one run", created before "Not done in this round
(issue 26)" when missing).

    python -m bench.goals                     # fresh skincare_bench; about 8 minutes; make bench runs it last
    python -m bench.goals --rounds 1 --bucket-rounds 1 --duration 3 --no-cpu --no-docs   # a quick check
    python -m bench.goals --render bench-results/goals.json   # the block of a saved run, written again
"""

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench import buckets, floor, strategies
from bench.drivers import audit, run_pgbench, run_wrk
from bench.report import DOCS, update_docs
from bench.run import run_cpu
from bench.seeding import seed
from bench.tools import ensure_tools
from devtools.processes import RESULTS, ROOT, Gunicorn, log
from devtools.processes import server_url as db_url

MARK_START, MARK_END = "<!-- goals:begin -->", "<!-- goals:end -->"
HEADING = "### The goals of issue 26, in one run"
BEFORE_HEADING = "### Not done in this round (issue 26)"
INTRO = (
    "`make bench` ends with `python -m bench.goals`, which measures every goal of item 6 in one run on one database, "
    "each\nbeside the baseline of the same run, with the framework's floor (`bench/floor.py`: the same gunicorn "
    "serving a\nminimal Django view that runs the seed's transaction with one cursor) beside the checkout; "
    "`bench/goals.py`'s\ndocstring says how each figure is taken. It rewrites the block below."
)

# The cells of part 1: what runs, on which server or in pgbench.
HTTP_CELLS = {  # cell -> (server, wrk mode)
    "hot": ("service", "hot"),
    "spread": ("service", "spread"),
    "floor-hot": ("floor", "hot"),
    "floor-spread": ("floor", "spread"),
    "soldout": ("service", "soldout"),
    "healthz": ("service", "healthz"),
}
PGBENCH_CELLS = {"seed-hot": "limit-hot-seed-order", "seed-spread": "limit-spread"}  # cell -> bench.drivers' limit
CELLS = ["seed-hot", "hot", "floor-hot", "seed-spread", "spread", "floor-spread", "soldout", "healthz"]
# Part 2: bench.buckets' subjects and client counts, grouped by the K the hot product needs.
BUCKET_CELLS = [("hot-1", 64), ("spread", 64), ("spread", 256), ("hot-16", 64), ("hot-16", 256)]

LABELS = {
    "seed-hot": "pgbench, the seed's transaction, hot (16 clients, -M prepared)",
    "seed-spread": "pgbench, the seed's transaction, spread (16 clients, -M prepared)",
    "hot": "HTTP checkout, hot",
    "spread": "HTTP checkout, spread",
    "floor-hot": "HTTP framework floor, hot",
    "floor-spread": "HTTP framework floor, spread",
    "soldout": "HTTP sold-out flood (409s)",
    "healthz": "HTTP /healthz",
}


# --- the measurements ----------------------------------------------------------------------------------------


def http_cell(server: Gunicorn, mode: str, *, duration: int, connections: int, tokens_file: Path) -> dict[str, Any]:
    """One wrk run; the figure per second (201s, 409s for the sold-out flood, requests for /healthz) and the
    PostgreSQL CPU per 201 (bench.sampling's reading of every PostgreSQL process over the run)."""
    r = run_wrk(server.base, mode, duration=duration, connections=connections, tokens_file=tokens_file,
                workers=server.worker_pids())  # fmt: skip
    created = r["status_201"]
    per_s = r["conflicts_per_s"] if mode == "soldout" else (r["rps"] if mode == "healthz" else r["ok_per_s"])
    return {
        "per_s": per_s,
        "pg_cpu_ms_per_checkout": round(10 * r["postgres_cpu_pct"] * r["seconds"] / created, 3) if created else None,
        "p99_ms": r["p99_ms"],
        "status_5xx": r["status_5xx"],
        "errors": r["socket_errors"] + r["status_4xx_other"],
        "worker_cpu_pct": round(sum(r["worker_cpu_pct"]), 1),
        "postgres_cpu_pct": r["postgres_cpu_pct"],
        "machine_cpu_pct": r["machine_cpu_pct"],
        "other_cpu_pct": r["other_cpu_pct"],
    }


def pgbench_cell(url: str, limit: str, *, duration: int, connections: int, customer_id: int) -> dict[str, Any]:
    """bench.drivers' limit cell (the seed's transaction, ``-M prepared``); PostgreSQL CPU per committed checkout
    from the same sampler as the HTTP cells (every one of the seed's transactions commits: stock never runs out)."""
    r = run_pgbench(url, limit, duration=duration, connections=connections, customer_id=customer_id)
    return {
        "per_s": r["ok_per_s"],
        "pg_cpu_ms_per_checkout": r["cpu_ms_per_request"],
        "p99_ms": r["p99_ms"],
        "status_5xx": 0,
        "errors": r["failed"],
        "postgres_cpu_pct": r["postgres_cpu_pct"],
        "machine_cpu_pct": r["machine_cpu_pct"],
        "other_cpu_pct": r["other_cpu_pct"],
    }


def _servers(url: str, customer_id: int, workers: int) -> tuple[Gunicorn, Gunicorn]:
    service = Gunicorn(url, workers=workers)
    floor_server = Gunicorn(
        url,
        workers=workers,
        app=floor.WSGI_APP,
        extra_env={"DJANGO_SETTINGS_MODULE": floor.SETTINGS_MODULE, "BENCH_FLOOR_CUSTOMER": customer_id},
    )
    return service, floor_server


def run_http_rounds(
    url: str, tokens_file: Path, customer_id: int, args: argparse.Namespace
) -> tuple[list[dict[str, Any]], list[bool], dict[str, str]]:
    """Part 1: both servers up, ``args.rounds`` rounds of CELLS (every other one reversed), the audit after each
    round; returns the cells, the audits and the servers' descriptions."""
    service, floor_server = _servers(url, customer_id, args.workers)
    cells: list[dict[str, Any]] = []
    audits = []
    service.start()
    try:
        floor_server.start()
        servers = {"service": service, "floor": floor_server}
        log(f"service: {service.describe()} on {service.base}; floor: {floor_server.describe()} on {floor_server.base}")
        for server in servers.values():  # warm-up: connections open, statements prepared
            run_wrk(server.base, "spread", duration=3, connections=args.connections, tokens_file=tokens_file,
                    workers=server.worker_pids())  # fmt: skip
        for r in range(args.rounds):
            for name in CELLS if r % 2 == 0 else CELLS[::-1]:
                if name in PGBENCH_CELLS:
                    cell = pgbench_cell(url, PGBENCH_CELLS[name], duration=args.duration,
                                        connections=args.connections, customer_id=customer_id)  # fmt: skip
                else:
                    which, mode = HTTP_CELLS[name]
                    cell = http_cell(servers[which], mode, duration=args.duration, connections=args.connections,
                                     tokens_file=tokens_file)  # fmt: skip
                cells.append({"cell": name, "round": r + 1, **cell})
                log(
                    f"  round {r + 1} {name:>12}: {cell['per_s']:8.1f}/s, PG CPU {cell['pg_cpu_ms_per_checkout']} "
                    f"ms/checkout, p99 {cell['p99_ms']} ms, 5xx {cell['status_5xx']}, errors {cell['errors']}, "
                    f"other CPU {cell['other_cpu_pct']}%"
                )
            audits.append(audit(url))
            log(f"round {r + 1}: audit_inventory {'clean' if audits[-1] else 'FAILED'}")
    finally:
        for server in (service, floor_server):
            errors = server.errors_in_log()
            server.stop()
            if errors:
                log(f"gunicorn ({server.app}) logged {len(errors)} error lines, e.g. {errors[0]}")
    return cells, audits, {"service": service.describe(), "floor": floor_server.describe()}


def run_bucket_rounds(url: str, customer_id: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Part 2: bench.buckets' cells, ``args.bucket_rounds`` rounds, every other one in reverse order; the hot
    product back in one bucket at the end."""
    buckets.prepare_database(url)
    cells = []
    for r in range(args.bucket_rounds):
        order = BUCKET_CELLS if r % 2 == 0 else BUCKET_CELLS[::-1]
        current = None
        for subject, clients in order:
            k = buckets.hot_buckets(subject)
            if k != current:
                log(f"bucket round {r + 1}: hot product -> {buckets.set_hot(url, k)} in {k} bucket(s)")
                current = k
            cell = buckets.run_cell(url, subject, clients=clients, duration=args.duration, customer_id=customer_id)
            cells.append({"round": r + 1, **cell})
    buckets.set_hot(url, 1)
    return cells


def read_cpu(url: str) -> dict[str, Any]:
    """Part 3: bench.run's ``run_cpu`` (``python -m bench.cpu`` on this database); its JSON."""
    run_cpu(url)
    return dict(json.loads((RESULTS / "cpu.json").read_text()))


# --- the goals -----------------------------------------------------------------------------------------------


def _values(cells: list[dict[str, Any]], name: str, key: str) -> list[float]:
    """``key`` of the cell ``name`` in each round, in round order (rounds where it is missing left out)."""
    rows = sorted((c for c in cells if c.get("cell", c.get("subject")) == name), key=lambda c: c["round"])
    return [c[key] for c in rows if c.get(key) is not None]


def _amount(value: float, unit: str) -> str:
    """``12/s`` (a rate, whole numbers) or ``0.390 ms``."""
    return f"{value:,.0f}{unit}" if unit.startswith("/") else f"{value:.3f} {unit}"


def goal_row(
    what: str,
    measured: list[float],
    baseline: list[float],
    *,
    baseline_what: str,
    unit: str,
    op: str | None,
    goal: float | None,
    absolute: bool = False,
) -> dict[str, Any]:
    """One row of the goal table: the medians over the rounds, their ratio and each round's, the goal (``op`` "≥"
    or "≤" on the ratio, or on the measured value when ``absolute``), met, and by how much it misses."""
    m = statistics.median(measured) if measured else None
    b = statistics.median(baseline) if baseline else None
    ratio = m / b if m is not None and b else None
    rounds = [x / y for x, y in zip(measured, baseline, strict=False) if y]
    subject = m if absolute else ratio
    met = None
    distance = "-"
    if op and goal is not None and subject is not None:
        met = subject >= goal if op == "≥" else subject <= goal
        if met:
            distance = "met"
        elif absolute:
            distance = f"over by {_amount(subject - goal, unit)} (+{100 * (subject / goal - 1):.0f} %)"
        elif op == "≥":
            assert m is not None and b is not None
            distance = f"short: needs +{100 * (goal / subject - 1):.0f} % ({_amount(goal * b - m, unit)} more)"
        else:
            assert m is not None and b is not None
            distance = f"over: needs -{100 * (1 - goal / subject):.0f} % ({_amount(m - goal * b, unit)} less)"
    return {
        "what": what, "measured": m, "measured_rounds": measured, "baseline_what": baseline_what, "baseline": b,
        "baseline_rounds": baseline, "unit": unit, "ratio": ratio, "ratio_rounds": rounds, "op": op, "goal": goal,
        "absolute": absolute, "met": met, "distance": distance,
    }  # fmt: skip


def goals(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Every goal of item 6 from a run's cells (the order of the issue)."""
    http, bk, cpu = report["cells"], report["bucket_cells"], report.get("cpu") or {}
    v = lambda name, key="per_s": _values(http, name, key)  # noqa: E731
    pg = lambda name: _values(http, name, "pg_cpu_ms_per_checkout")  # noqa: E731

    def bucket(subject: str, clients: int) -> list[float]:
        rows = sorted((c for c in bk if (c["subject"], c["clients"]) == (subject, clients)), key=lambda c: c["round"])
        return [c["ok_per_s"] for c in rows]

    rows: list[dict[str, Any]] = []
    add: Callable[..., None] = lambda *a, **k: rows.append(goal_row(*a, **k))  # noqa: E731
    for kind in ("hot", "spread"):
        add(f"PostgreSQL CPU per checkout through HTTP, {kind}", pg(kind), pg(f"seed-{kind}"), unit="ms",
            baseline_what=f"the seed's transaction, pgbench -M prepared, {kind}", op="≤", goal=1.0)  # fmt: skip
    add("HTTP checkouts/s, hot", v("hot"), v("seed-hot"), unit="/s", op="≥", goal=0.4,
        baseline_what="the seed's transaction, pgbench -M prepared, hot")  # fmt: skip
    add("HTTP checkouts/s, spread", v("spread"), v("seed-spread"), unit="/s", op="≥", goal=0.15,
        baseline_what="the seed's transaction, pgbench -M prepared, spread")  # fmt: skip
    add("HTTP sold-out 409s/s", v("soldout"), v("healthz"), unit="/s", op="≥", goal=0.7,
        baseline_what="HTTP /healthz requests/s")  # fmt: skip
    for kind in ("hot", "spread"):
        add(f"HTTP framework floor checkouts/s, {kind}", v(f"floor-{kind}"), v(f"seed-{kind}"), unit="/s", op=None,
            goal=None, baseline_what=f"the seed's transaction, pgbench -M prepared, {kind}")  # fmt: skip
        add(f"HTTP checkouts/s, {kind} ÷ the framework floor", v(kind), v(f"floor-{kind}"), unit="/s", op=None,
            goal=None, baseline_what=f"the framework floor, {kind}")  # fmt: skip
        add(f"PostgreSQL CPU per checkout, the framework floor, {kind}", pg(f"floor-{kind}"), pg(f"seed-{kind}"),
            unit="ms", op=None, goal=None, baseline_what=f"the seed's transaction, pgbench -M prepared, {kind}")  # fmt: skip
    add("pgbench, service's statements, K = 16 at 64 clients", bucket("hot-16", 64), bucket("spread", 64), unit="/s",
        op="≥", goal=0.7, baseline_what="spread at 64 clients")  # fmt: skip
    add("pgbench, service's statements, K = 16 at 64 clients", bucket("hot-16", 64), bucket("hot-1", 64), unit="/s",
        op="≥", goal=3.0, baseline_what="one row (K = 1) at 64 clients")  # fmt: skip
    add("pgbench, service's statements, K = 16 at 256 clients", bucket("hot-16", 256), bucket("spread", 256),
        unit="/s", op="≥", goal=0.5, baseline_what="spread at 256 clients")  # fmt: skip
    healthz = [cpu["healthz"]["median_ms"]] if "healthz" in cpu else []
    for scenario, label, goal in (("checkout", "checkout", 1.3), ("checkout_sold_out", "sold-out checkout (409)", 0.35),
                                  ("product_get", "product GET", 0.35)):  # fmt: skip
        if scenario in cpu:
            add(f"in-process Python CPU per request (bench.cpu), {label}", [cpu[scenario]["median_ms"]], healthz,
                unit="ms", op="≤", goal=goal, absolute=True, baseline_what="`GET /healthz`, same run")  # fmt: skip
    return rows


# --- the report ----------------------------------------------------------------------------------------------


def _num(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "ms":
        return f"{value:.3f} ms" if value < 1 else f"{value:.2f} ms"
    return f"{value:,.0f}{unit}"


def markdown(report: dict[str, Any]) -> str:
    """The block of docs/benchmarks.md: the run, the goal table, the cells."""
    a = report["args"]
    lines = [
        f"`{report['command']}`, {report['started']} to {report['finished']} UTC ({report['wall_seconds']} s after "
        f"seeding); load average before {report['load_before']}, after {report['load_after']}. HTTP and the seed's "
        f"pgbench: {a['connections']} connections / clients, {a['duration']} s per cell, {a['rounds']} rounds "
        f"alternating the order; gunicorn: {report['servers'].get('service', '-')} (the floor: the same, serving "
        f"`bench/floor.py`). bench.buckets' cells: {a['bucket_rounds']} rounds. Medians over the rounds; the ratio "
        "is of the medians, [each round's] beside it.",
        "",
        "| measured | median | baseline of the same run | median | ratio [rounds] | goal | met / by how much |",
        "|---|---:|---|---:|---:|---:|---|",
    ]
    for g in report["goals"]:
        rounds = " / ".join(f"{r:.2f}" for r in g["ratio_rounds"])
        ratio = (
            "-" if g["ratio"] is None else f"{g['ratio']:.2f}" + (f" [{rounds}]" if len(g["ratio_rounds"]) > 1 else "")
        )
        goal = (
            "-"
            if g["op"] is None
            else (f"{g['op']} {g['goal']} {g['unit']}" if g["absolute"] else f"{g['op']} {g['goal']}x")
        )
        met = "-" if g["met"] is None else ("**yes**" if g["met"] else f"no: {g['distance']}")
        lines.append(
            f"| {g['what']} | {_num(g['measured'], g['unit'])} | {g['baseline_what']} | {_num(g['baseline'], g['unit'])} "
            f"| {ratio} | {goal} | {met} |"
        )  # fmt: skip
    lines += [
        "",
        "| cell | per second [rounds] | PostgreSQL CPU ms per checkout [rounds] | p99 ms (worst) | 5xx | errors "
        "| other processes' CPU % (max) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in CELLS:
        rows = [c for c in report["cells"] if c["cell"] == name]
        if not rows:
            continue
        per_s, pg = _values(rows, name, "per_s"), _values(rows, name, "pg_cpu_ms_per_checkout")
        lines.append(
            f"| {LABELS[name]} | {statistics.median(per_s):,.0f} [{' / '.join(f'{x:,.0f}' for x in per_s)}] | "
            + (f"{statistics.median(pg):.2f} [{' / '.join(f'{x:.2f}' for x in pg)}]" if pg else "-")
            + f" | {max(c['p99_ms'] or 0 for c in rows):.1f} | {sum(c['status_5xx'] for c in rows)} | "
            f"{sum(c['errors'] for c in rows)} | {max(c['other_cpu_pct'] or 0 for c in rows):.0f} |"
        )
    for subject, clients in BUCKET_CELLS:
        rows = [c for c in report["bucket_cells"] if (c["subject"], c["clients"]) == (subject, clients)]
        if not rows:
            continue
        per_s = [c["ok_per_s"] for c in rows]
        pg = [c["pg_cpu_ms_per_checkout"] for c in rows if c["pg_cpu_ms_per_checkout"] is not None]
        miss = sum(c["waited"] for c in rows) / max(1, sum(c["committed"] for c in rows))
        label = buckets._label(subject) + f", {clients} clients" + (f" (miss rate {100 * miss:.0f} %)" if subject.startswith("hot-") and subject != "hot-1" else "")  # fmt: skip
        lines.append(
            f"| pgbench, service's statements: {label} | {statistics.median(per_s):,.0f} "
            f"[{' / '.join(f'{x:,.0f}' for x in per_s)}] | "
            + (f"{statistics.median(pg):.2f} [{' / '.join(f'{x:.2f}' for x in pg)}]" if pg else "-")
            + f" | {max(c['p99_ms'] or 0 for c in rows):.1f} | 0 | {sum(c['failed'] + c['fallback_needed'] for c in rows)} "
            f"| {max(c['other_cpu_pct'] or 0 for c in rows):.0f} |"
        )
    clean = all(report["audits"])
    lines += [
        "",
        f"`manage.py audit_inventory` after each of the {len(report['audits']) - 1} rounds of HTTP and seed cells "
        "and after bench.buckets' cells: "
        f"{'clean' if clean else '**FAILED**'}. Met: {sum(1 for g in report['goals'] if g['met'])} of "
        f"{sum(1 for g in report['goals'] if g['met'] is not None)} goals.",
    ]
    return "\n".join(lines)


def write_docs(block: str, path: Path = DOCS) -> None:
    """The block between the goals markers of ``path``; the subsection (heading, a sentence, the markers) is created
    just before "Not done in this round (issue 26)" when the markers are missing (at the end without that heading)."""
    text = path.read_text()
    if MARK_START not in text:
        section = f"{HEADING}\n\n{INTRO}\n\n{MARK_START}\n{MARK_END}\n\n"
        if BEFORE_HEADING in text:
            text = text.replace(BEFORE_HEADING, section + BEFORE_HEADING, 1)
        else:
            text = text.rstrip("\n") + "\n\n" + section
        path.write_text(text)
    update_docs(block, path, start=MARK_START, end=MARK_END)


def exit_code(report: dict[str, Any]) -> int:
    """1 when an audit failed, or a cell saw a 5xx, a socket error, a pgbench failure or a bucket fallback."""
    bad = (
        not all(report["audits"])
        or any(c["status_5xx"] or c["errors"] for c in report["cells"])
        or any(c["failed"] or c["fallback_needed"] for c in report["bucket_cells"])
    )
    return 1 if bad else 0


# --- the run -------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.goals")
    parser.add_argument("--duration", type=int, default=8, help="seconds per cell (default 8)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the HTTP and seed cells (default 3)")
    parser.add_argument("--bucket-rounds", type=int, default=2, help="rounds of bench.buckets' cells (default 2)")
    parser.add_argument("--connections", type=int, default=16, help="wrk connections and pgbench clients (16)")
    parser.add_argument(
        "--workers", type=int, default=int(os.environ.get("WEB_CONCURRENCY", (os.cpu_count() or 2) + 1))
    )
    parser.add_argument("--no-cpu", action="store_true", help="skip bench.cpu (in-process Python CPU)")
    parser.add_argument("--dbname", default="skincare_bench", help="benchmark database (dropped and re-created)")
    parser.add_argument("--no-docs", action="store_true", help="do not touch docs/ (results in bench-results/)")
    parser.add_argument("--render", metavar="JSON", help="only write the block of a saved run (goals.json) again")
    return parser.parse_args(argv)


def run(url: str, tokens_file: Path, customer_id: int, args: argparse.Namespace, *, command: str) -> dict[str, Any]:
    """Everything on the seeded database at ``url``; the report (goals included)."""
    t0 = time.monotonic()
    report: dict[str, Any] = {
        "command": command,
        "started": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "load_before": ", ".join(f"{x:.1f}" for x in os.getloadavg()),
        "args": {k: v for k, v in vars(args).items() if k != "render"},
    }
    strategies.set_strategy(url, "guarded_update")
    buckets.set_hot(url, 1)  # the seed's UPDATE and the floor name no bucket: one row
    log(f"part 1: HTTP (service, floor) and the seed's pgbench, {args.rounds} rounds x {len(CELLS)} cells")
    report["cells"], report["audits"], report["servers"] = run_http_rounds(url, tokens_file, customer_id, args)
    log(f"part 2: bench.buckets' cells, {args.bucket_rounds} rounds")
    report["bucket_cells"] = run_bucket_rounds(url, customer_id, args)
    report["audits"].append(audit(url))
    log(f"audit_inventory after the bucket cells: {'clean' if report['audits'][-1] else 'FAILED'}")
    report["cpu"] = {} if args.no_cpu else read_cpu(url)
    report["wall_seconds"] = round(time.monotonic() - t0)
    report["finished"] = time.strftime("%H:%M", time.gmtime())
    report["load_after"] = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    report["goals"] = goals(report)
    return report


def publish(report: dict[str, Any], *, docs: bool) -> None:
    block = markdown(report)
    print("\n" + block)
    if docs:
        write_docs(block)
        log(f"wrote the goals block of {DOCS.relative_to(ROOT)}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        report = json.loads(Path(args.render).read_text())
        report["goals"] = goals(report)
        publish(report, docs=not args.no_docs)
        return exit_code(report)
    RESULTS.mkdir(exist_ok=True)
    ensure_tools()
    url = db_url(args.dbname)
    tokens_file, customer_id = seed(url)
    command = "python -m bench.goals" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    report = run(url, tokens_file, customer_id, args, command=command)
    (RESULTS / "goals.json").write_text(json.dumps(report, indent=2))
    publish(report, docs=not args.no_docs)
    return exit_code(report)


if __name__ == "__main__":
    sys.exit(main())
