"""``python -m bench <name>``: the project's measurements (docs/benchmarks.md).

    python -m bench table      # make bench: every cell below and the crowd's first minute, written into docs/benchmarks.md
    python -m bench http       # the HTTP cells only (wrk through gunicorn), printed
    python -m bench pgbench    # the pgbench cells only (the seed's transaction, the service's statements), printed
    python -m bench cpu        # Python CPU per request, in-process; --against GIT_REF for an A/B (bench.cpu)
    python -m bench loadtest   # make loadtest: the Locust swarm checks (bench.loadtest)
    python -m bench crowd      # make loadtest-wait: 50,000 waiting buyers, light client (bench.waitline, bench.crowd)

``table``, ``http`` and ``pgbench`` seed a fresh benchmark database (skincare_bench) and take ``--rounds``,
``--duration`` (seconds per cell) and ``--connections`` (wrk connections and pgbench clients); ``--only`` runs the
rows whose label contains a text (with their baselines) and prints them, leaving docs/benchmarks.md alone.
"""

import argparse
import json
import sys
import time
from collections.abc import Sequence

from bench import ab, cells, cpu, loadtest, table, waitline
from bench.seeding import seed
from bench.tools import ensure_tools
from config.environment import web_threads
from devtools.processes import PY, RESULTS, ROOT, django_env, log, server_url

COMMANDS = ("table", "http", "pgbench", "cpu", "loadtest", "crowd")


def service_statements(url: str) -> dict:
    """bench.scripts' reading of what the service sends, in a Django process on the benchmark database."""
    import subprocess

    proc = subprocess.run([PY, "-m", "bench.scripts"], cwd=ROOT, env=django_env(url), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"python -m bench.scripts failed:\n{proc.stdout}{proc.stderr}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def measure(command: str, argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m bench {command}")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of every cell, alternating the order (5)")
    parser.add_argument("--duration", type=int, default=5, help="seconds per cell (5)")
    parser.add_argument("--connections", type=int, default=16, help="wrk connections and pgbench clients (16)")
    parser.add_argument("--no-docs", action="store_true", help="table: print it, leave docs/benchmarks.md alone")
    parser.add_argument(
        "--only", action="append", default=[], metavar="TEXT", help="only the rows containing TEXT, and their baselines"
    )
    args = parser.parse_args(argv)
    wanted = [c for c in cells.CELLS if command == "table" or (command == "http") == bool(c.server)]
    if args.only:
        wanted = cells.only(wanted, args.only)
        if not wanted:
            parser.error(f"no {command} row contains {' or '.join(map(repr, args.only))}")
    ensure_tools()
    started = time.monotonic()
    url = server_url("skincare_bench")
    tokens_file, customer_id = seed(url)
    ctx = cells.Context(url, tokens_file, customer_id, service_statements(url), args.duration, args.connections)
    log(f"{len(wanted)} cells x {args.rounds} rounds, {args.duration} s each, {args.connections} connections")
    results = cells.run_rounds(ctx, wanted, args.rounds)
    rows = table.summarise(results, {c.row: c.baseline for c in wanted})
    if command == "table" and not args.only:
        log("in-process Python CPU per request (bench.cpu)")
        rows += cpu.rows(cpu.run_worker(ROOT, url, rounds=7, requests=300, warmup=50))
    (RESULTS / f"bench-{command}.json").write_text(json.dumps({"cells": results, "rows": rows}, indent=2))
    run = (
        f"`python -m bench {command}` ({round((time.monotonic() - started) / 60)} minutes): {args.rounds} rounds of every cell, "
        f"{args.duration} s per cell, {args.connections} wrk connections / pgbench clients, gunicorn with "
        f"{cells.WORKERS} workers x {web_threads()} threads; medians over the rounds."
    )
    block = table.markdown(rows, table.header(table.machine(), table.server_settings(url), run))
    crowd_violations: list[str] = []
    if command == "table" and not args.only:
        log("the crowd's first minute (bench.waitline, the signed pass)")
        crowd_args = waitline.parse_args(["--mode", "pass"])
        crowd = waitline.run_mode(crowd_args, send_pass=True)
        crowd_violations = crowd["violations"]
        block += "\n\n" + waitline.first_minute(crowd, crowd_args)
    print("\n" + block)
    if command == "table" and not args.no_docs and not args.only:
        table.write_block(block)
        log(f"wrote the results table of {table.DOCS.relative_to(ROOT)}")
    for violation in crowd_violations:
        log(f"the crowd's first minute: {violation}")
    return 1 if crowd_violations or any(row["errors"] or not row["audit_clean"] for row in rows) else 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        print(__doc__)
        return 2
    command, rest = argv[0], argv[1:]
    if command == "cpu":
        args = cpu.parse_args(rest)
        if args.against:  # an A/B: this tree against a commit, each in its own worktree and database (bench.ab)
            return ab.main(
                args.against,
                rounds=args.rounds,
                requests=args.requests,
                warmup=args.warmup,
                pairs=args.pairs,
                only=tuple(args.only),
            )
        return cpu.main(rest)
    if command == "loadtest":
        return int(loadtest.main(rest) or 0)
    if command == "crowd":
        return waitline.main(rest)
    return measure(command, rest)


if __name__ == "__main__":
    sys.exit(main())
