"""One fixed HTTP measurement run the same way against any commit, alternating: the driver for bisecting a regression.

    python -m bench.ab d6b5534 main                      # A B A B A B: three rounds, hot and spread, a table out
    python -m bench.ab d6b5534 5fd6f7f 456adc7 main --rounds 2   # several revisions, round-robin (A B C D A B C D)
    python -m bench.ab /work/wt/old-d6b5534 . --rounds 3         # worktrees instead of revisions
    python -m bench.ab --report bench-results/ab.json --max-other 1000   # a saved run's table, every run kept

Each revision runs **its own** harness, server, schema and seeding, with identical flags:
``python -m bench.run --only hot,spread --connections 16 --duration 8 --quiet-wait 0 --no-docs --dbname <its own>``
(the flags exist unchanged since d6b5534), in a git worktree of that revision (``<parent of this checkout>/old-<sha>``,
created when missing, its ``.venv`` this checkout's). The load generator is the same for every revision: this
checkout's ``bench/checkout.lua`` is copied over the worktree's before each run. All revisions use ONE PostgreSQL
server (``DATABASE_URL``, else this checkout's embedded one), one database per revision, so the server's settings
are the same; the worktree's ``.data`` is linked to this checkout's so that bench.sampling finds the postmaster and
reads PostgreSQL's CPU (every PostgreSQL process, exited backends included) from /proc.

Every run takes the shared benchmark lock (``flock /work/bench.lock``, ``--lock``) for itself only (about a minute:
the seeding, a 3 s warm-up, then 8 s hot and 8 s spread), so other benchmarks wait at most one run; ``--lock-per
round`` holds it for one round of every revision instead (fewer waits, pairs closer in time). Once the lock is held
the load average is recorded; a run during which other processes used more than ``--max-other`` % of a core (25)
is repeated, at most ``--retries`` times (2), and the last one kept: on a shared machine such a run measures the
neighbours. ``--report FILE...`` prints the table of saved runs, leaving out those above ``--max-other``. Reported per revision: the medians of checkouts/s (201s), PostgreSQL CPU and gunicorn
workers' CPU per checkout (ms; % of one core x 10 / checkouts per second), and the ratios of the medians against the
first revision (the baseline of the same sitting). Raw results: ``bench-results/ab.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench-results"
SCENARIOS = ("hot", "spread")


def log(msg: str) -> None:
    print(f"[ab {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


class Revision:
    """A revision under test: a worktree at one commit (created for a revision name, or given as a directory)."""

    def __init__(self, spec: str, worktrees: Path) -> None:
        self.spec = spec
        path = Path(spec)
        if path.is_dir():
            self.path = path.resolve()
            self.sha = git("rev-parse", "--short=7", "HEAD", cwd=self.path)
        else:
            self.sha = git("rev-parse", "--short=7", f"{spec}^{{commit}}")
            self.path = worktrees / f"old-{self.sha}"
        self.label = self.sha if spec in (self.sha, str(self.path)) else f"{self.sha} ({spec})"
        self.created = False
        self.subject = ""

    def prepare(self, data_dir: Path | None) -> None:
        if not self.path.exists():
            log(f"worktree {self.path} at {self.sha}")
            git("worktree", "add", "--detach", str(self.path), self.sha)
            self.created = True
        self.subject = git("log", "-1", "--format=%s", cwd=self.path)[:70]
        venv = self.path / ".venv"
        if not venv.exists():
            venv.symlink_to((ROOT / ".venv").resolve())
        if self.path != ROOT:
            shutil.copyfile(ROOT / "bench/checkout.lua", self.path / "bench/checkout.lua")  # one load generator
            data = self.path / ".data"
            if data_dir is not None and not data.exists():
                data.symlink_to(data_dir)  # bench.sampling reads the postmaster's pid from ROOT/.data/pg

    def remove(self) -> None:
        if not self.created:
            return
        for link in (self.path / ".data", self.path / ".venv"):
            if link.is_symlink():
                link.unlink()
        git("worktree", "remove", "--force", str(self.path))


def server_url() -> str:
    """This checkout's embedded server (started if needed), or DATABASE_URL's server."""
    if os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"]
    out = subprocess.run(
        [str(ROOT / ".venv/bin/python"), "-m", "devtools.devdb", "ensure", "--dbname", "postgres"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def drop_database(url: str, dbname: str) -> None:
    """Drop a run's database once it is read: the one server is shared by every revision, and the autovacuum of a
    finished run's tables would otherwise be charged to the next run's PostgreSQL CPU."""
    import psycopg

    from devtools.processes import admin_conninfo

    with psycopg.connect(admin_conninfo(url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run_once(rev: Revision, args: argparse.Namespace, url: str) -> dict[str, Any]:
    """One locked ``bench.run`` of ``rev``; its hot and spread results."""
    dbname = f"skincare_bench_ab_{rev.sha}"
    bench = [
        str(rev.path / ".venv/bin/python"), "-m", "bench.run",
        "--only", ",".join(args.scenarios), "--connections", str(args.connections),
        "--duration", str(args.duration), "--quiet-wait", "0", "--no-docs", "--dbname", dbname,
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DB_", "GUNICORN_", "WEB_"))}
    env["DATABASE_URL"] = url
    out_json = rev.path / "bench-results/bench.json"
    out_json.unlink(missing_ok=True)
    waited = time.monotonic()
    # The load average is read once the lock is held, by a shell that then runs the benchmark.
    show_load = 'echo "LOADAVG $(cut -d" " -f1-3 /proc/loadavg)"; exec "$@"'
    lock = ["flock", args.lock] if args.lock and args.lock_per == "run" else []
    wrapped = [*lock, "sh", "-c", show_load, "sh", *bench]
    proc = subprocess.run(wrapped, cwd=rev.path, env=env, capture_output=True, text=True, check=False)
    load = next((line.split(" ", 1)[1] for line in proc.stdout.splitlines() if line.startswith("LOADAVG ")), loadavg())
    with (RESULTS / f"ab-{rev.sha}.log").open("a") as f:
        f.write(proc.stdout + proc.stderr)
    if not out_json.exists():
        raise SystemExit(f"bench.run failed at {rev.label} ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    report = json.loads(out_json.read_text())
    drop_database(url, dbname)
    row: dict[str, Any] = {"revision": rev.sha, "load_before": load, "wall_s": round(time.monotonic() - waited)}
    for name in args.scenarios:
        r = report["results"][name]
        ok = r["ok_per_s"]
        row[name] = {
            "ok_per_s": ok,
            "pg_ms": round(10 * r["postgres_cpu_pct"] / ok, 3) if ok else None,
            "gunicorn_ms": round(10 * sum(r["worker_cpu_pct"]) / ok, 3) if ok else None,
            "p99_ms": r["p99_ms"],
            "status_5xx": r["status_5xx"],
            "other_cpu_pct": r.get("other_cpu_pct"),
            "audit_clean": r["audit_clean"],
        }
    return row


def other_cpu(row: dict[str, Any], scenarios: Sequence[str]) -> float:
    """The most CPU that processes outside the benchmark used during one of the run's scenarios (% of one core)."""
    return max(row[s]["other_cpu_pct"] or 0.0 for s in scenarios)


def clean_run(rev: Revision, args: argparse.Namespace, url: str) -> dict[str, Any]:
    """``run_once``, repeated (at most ``--retries`` times) while other processes used more than ``--max-other``
    % of a core during it: on a shared machine such a run measures the neighbours. The last one is kept."""
    for attempt in range(args.retries + 1):
        row = run_once(rev, args, url)
        row["attempt"] = attempt + 1
        if other_cpu(row, args.scenarios) <= args.max_other:
            break
        log(f"{rev.label}: other processes used {other_cpu(row, args.scenarios):.0f} % of a core; again")
    return row


def median(values: Sequence[float | None]) -> float | None:
    clean = [v for v in values if v is not None]
    return statistics.median(clean) if clean else None


def table(revisions: Sequence[Revision], runs: Sequence[dict[str, Any]], scenarios: Sequence[str]) -> str:
    """Medians per revision and their ratios against the first revision's medians."""
    med: dict[str, dict[str, dict[str, float | None]]] = {}
    for rev in revisions:
        mine = [r for r in runs if r["revision"] == rev.sha]
        med[rev.sha] = {
            s: {k: median([r[s][k] for r in mine]) for k in ("ok_per_s", "pg_ms", "gunicorn_ms")} for s in scenarios
        }
    base = med[revisions[0].sha]
    head = ["revision", "runs", "others' CPU %"]
    for s in scenarios:
        head += [f"{s}/s", f"PG ms/checkout {s}", f"gunicorn ms/checkout {s}"]
    head += [f"{s}/s vs base" for s in scenarios] + [f"PG ms {s} vs base" for s in scenarios]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 2 + "---:|" * (len(head) - 2)]
    for rev in revisions:
        mine = [r for r in runs if r["revision"] == rev.sha]
        m = med[rev.sha]
        if not mine:  # every run of it left out (--report --max-other)
            lines.append("| " + " | ".join([f"{rev.label} {rev.subject[:40]}", "0"] + ["-"] * (len(head) - 2)) + " |")
            continue
        others = ", ".join(f"{other_cpu(r, scenarios):.0f}" for r in mine)
        cells = [f"{rev.label} {rev.subject[:40]}", str(len(mine)), others]
        for s in scenarios:
            per_run = ", ".join(f"{r[s]['ok_per_s']:.0f}" for r in mine)
            cells += [f"**{m[s]['ok_per_s']:.0f}** ({per_run})", f"{m[s]['pg_ms']:.2f}", f"{m[s]['gunicorn_ms']:.2f}"]

        def ratio(a: float | None, b: float | None) -> str:
            return f"{a / b:.2f}" if a and b else "-"

        cells += [ratio(m[s]["ok_per_s"], base[s]["ok_per_s"]) for s in scenarios]
        cells += [ratio(m[s]["pg_ms"], base[s]["pg_ms"]) for s in scenarios]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("revisions", nargs="*", help="revisions or worktree directories; the first is the baseline")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3: A B A B A B)")
    p.add_argument("--duration", type=int, default=8, help="seconds per scenario (default 8)")
    p.add_argument("--connections", type=int, default=16)
    p.add_argument("--scenarios", default=",".join(SCENARIOS), type=lambda s: s.split(","))
    p.add_argument("--lock", default="/work/bench.lock", help="flock file taken per run ('' for none)")
    p.add_argument("--worktrees", type=Path, default=ROOT.parent, help="where old-<sha> worktrees are created")
    p.add_argument("--keep", action="store_true", help="keep the worktrees this run created")
    p.add_argument(
        "--lock-per",
        choices=("run", "round"),
        default="run",
        help="hold the lock for one run (default) or for one round of every revision (fewer waits, closer pairs)",
    )
    p.add_argument(
        "--max-other", type=float, default=25.0, help="a run is repeated while others used more (%% of a core)"
    )
    p.add_argument("--retries", type=int, default=2, help="repeats of a run that others disturbed (default 2)")
    p.add_argument("--json", type=Path, default=RESULTS / "ab.json")
    p.add_argument("--report", type=Path, nargs="+", help="print the table of earlier runs (their --json files)")
    args = p.parse_args(argv)
    if not args.revisions and not args.report:
        p.error("name the revisions (or worktrees) to compare, the baseline first")
    return args


@contextlib.contextmanager
def round_lock(args: argparse.Namespace) -> Iterator[None]:
    """With ``--lock-per round``: the lock held for a whole round (each run takes none of its own)."""
    if not args.lock or args.lock_per != "round":
        yield
        return
    with open(args.lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def report(paths: Sequence[Path], scenarios: Sequence[str], max_other: float) -> str:
    """The table of the runs saved in ``paths`` (merged; the first file's revisions first, the baseline first),
    without the runs that other processes disturbed (more than ``max_other`` % of a core)."""
    revisions: dict[str, Any] = {}
    runs: list[dict[str, Any]] = []
    for path in paths:
        saved = json.loads(path.read_text())
        for r in saved["revisions"]:
            rev = revisions.setdefault(r["sha"], Revision.__new__(Revision))
            rev.sha, rev.label, rev.subject = r["sha"], r["label"], r["subject"]
        runs += saved["runs"]
    clean = [r for r in runs if other_cpu(r, scenarios) <= max_other]
    note = f"\n\n({len(runs) - len(clean)} of {len(runs)} runs left out: others used more than {max_other:.0f} % of a core)"
    return table(list(revisions.values()), clean, scenarios) + note


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report:
        print(report(args.report, args.scenarios, args.max_other))
        return 0
    RESULTS.mkdir(exist_ok=True)
    url = server_url()
    data_dir = (ROOT / ".data").resolve() if not os.environ.get("DATABASE_URL") else None
    revisions = [Revision(spec, args.worktrees) for spec in args.revisions]
    runs: list[dict[str, Any]] = []
    try:
        for rev in revisions:
            rev.prepare(data_dir)
        for rnd in range(args.rounds):
            with round_lock(args):
                rows = [clean_run(rev, args, url) for rev in revisions]
            for rev, row in zip(revisions, rows, strict=True):
                row["round"] = rnd + 1
                runs.append(row)
                log(
                    f"round {rnd + 1} {rev.label}: "
                    + ", ".join(
                        f"{s} {row[s]['ok_per_s']:.0f}/s PG {row[s]['pg_ms']} gunicorn {row[s]['gunicorn_ms']} ms"
                        for s in args.scenarios
                    )
                    + f" (load {row['load_before']}, {row['wall_s']} s with the lock wait)"
                )
            saved = [{"sha": r.sha, "label": r.label, "subject": r.subject} for r in revisions]
            args.json.write_text(json.dumps({"argv": sys.argv[1:], "revisions": saved, "runs": runs}, indent=2))
    finally:
        if not args.keep:
            for rev in revisions:
                rev.remove()
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(
        f"\n`python -m bench.ab {' '.join(args.revisions)} --rounds {args.rounds}` ({stamp}; wrk -c{args.connections}, "
        f"{args.duration} s per scenario; load before each run: {', '.join(r['load_before'] for r in runs)}):\n"
    )
    print(table(revisions, runs, args.scenarios))
    bad = [r for r in runs for s in args.scenarios if r[s]["status_5xx"] or not r[s]["audit_clean"]]
    if bad:
        print(f"\n{len(bad)} run(s) saw a 5xx or a failed audit: see {args.json}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
