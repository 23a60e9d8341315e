"""``python -m bench cpu --against GIT_REF``: is this tree slower than another commit, per request, for the checkout,
the sold-out refusal and the product GET?

The ref is checked out (``git worktree add --detach``) into a temporary directory; each side gets its own fresh
database on the same embedded PostgreSQL server (same settings for both), migrated by its own code. Then bench.cpu's
worker runs in this tree and in the ref's, alternately, ``--pairs`` times (A B, B A, A B, …); per scenario the
median of each side's medians and their ratio (this tree ÷ the ref: below 1.00 is faster). The temporary checkout is
removed at the end.
"""

import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from bench.cpu import run_worker, text_table
from devtools.processes import ROOT, admin_conninfo, log, server_url

SIDES = {"this tree": "skincare_bench_ab_this", "ref": "skincare_bench_ab_ref"}


def _fresh_database(name: str) -> str:
    """An empty database ``name`` on the embedded server (dropped first); its URL."""
    import psycopg

    url = server_url(name)
    with psycopg.connect(admin_conninfo(url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return url


def combine(runs: dict[str, list[dict[str, dict[str, Any]]]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Each side's runs as one result per scenario: the median over the runs of each run's median."""
    return {
        side: {
            name: {key: statistics.median(r[name][key] for r in side_runs) for key in ("python_cpu_ms", "pg_cpu_ms")}
            for name in side_runs[0]
        }
        for side, side_runs in runs.items()
    }


def main(ref: str, *, rounds: int, requests: int, warmup: int, pairs: int, only: tuple[str, ...] = ()) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="bench-ab-"))
    tree = tmp / "ref"
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), ref], cwd=ROOT, check=True, capture_output=True)
    try:
        trees = {"this tree": ROOT, "ref": tree}
        urls = {side: _fresh_database(name) for side, name in SIDES.items()}
        runs: dict[str, list[dict[str, dict[str, Any]]]] = {side: [] for side in SIDES}
        for n in range(pairs):
            for side in list(SIDES) if n % 2 == 0 else list(SIDES)[::-1]:
                log(f"pair {n + 1}/{pairs}: {side}")
                runs[side].append(
                    run_worker(trees[side], urls[side], rounds=rounds, requests=requests, warmup=warmup, only=only)
                )
        print(f"bench.cpu A/B: this tree ({_describe(ROOT)}) against {ref} ({_describe(tree)}); {pairs} runs each, "
              f"alternating, {rounds} rounds x {requests} requests per run; medians of the runs' medians")  # fmt: skip
        print(text_table(combine(runs)))
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _describe(tree: Path) -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=tree, capture_output=True, text=True
    )
    return head.stdout.strip() + (" + uncommitted changes" if dirty.stdout.strip() else "")
