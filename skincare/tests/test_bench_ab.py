"""``bench.ab``, the bisect driver: every revision runs the same bench.run command (only its database differs), the
load average is read once the lock is held, and the table gives each revision's medians with ratios against the
first revision's medians."""

import argparse
import contextlib
from pathlib import Path

from bench import ab


def _run(sha: str, hot: float, pg: float, spread: float = 400.0) -> dict[str, object]:
    def cell(ok: float, pg_ms: float) -> dict[str, object]:
        return {
            "ok_per_s": ok,
            "pg_ms": pg_ms,
            "gunicorn_ms": 2.0,
            "status_5xx": 0,
            "audit_clean": True,
            "other_cpu_pct": 5.0,
        }

    return {"revision": sha, "load_before": "1.00 1.00 1.00", "hot": cell(hot, pg), "spread": cell(spread, 1.0)}


class _Rev:
    def __init__(self, sha: str) -> None:
        self.sha, self.label, self.subject = sha, sha, "subject"


def test_the_table_gives_medians_and_ratios_against_the_first_revision() -> None:
    runs = [
        _run("aaaaaaa", 400, 1.0),
        _run("bbbbbbb", 300, 1.5),
        _run("aaaaaaa", 500, 1.2),
        _run("bbbbbbb", 200, 1.4),
        _run("aaaaaaa", 450, 0.8),
        _run("bbbbbbb", 250, 1.6),
    ]

    rows = ab.table([_Rev("aaaaaaa"), _Rev("bbbbbbb")], runs, ["hot", "spread"]).splitlines()

    base, other = rows[2].split(" | "), rows[3].split(" | ")
    assert base[2] == "5, 5, 5"  # others' CPU in each run
    assert base[3].startswith("**450** (400, 500, 450)")  # the median of the three, then each run in order
    assert other[3].startswith("**250** (300, 200, 250)")
    assert other[4] == "1.50"  # median PG ms per checkout
    assert other[-4:-2] == ["0.56", "1.00"]  # hot/s and spread/s against the baseline's medians: 250/450, 400/400
    assert other[-2] == "1.50"  # PG ms hot: the medians 1.5 against 1.0 (the baseline's runs 1.0, 1.2, 0.8)
    assert base[-4:] == ["1.00", "1.00", "1.00", "1.00 |"]


def test_every_revision_runs_the_same_command_under_the_lock(tmp_path: Path, monkeypatch) -> None:
    commands = []

    def fake_run(cmd, **kwargs):
        commands.append((cmd, kwargs["cwd"], kwargs["env"]))
        raise SystemExit("stop here")

    monkeypatch.setattr(ab.subprocess, "run", fake_run)
    args = argparse.Namespace(
        scenarios=["hot", "spread"],
        connections=16,
        duration=8,
        lock="/work/bench.lock",
        lock_per="run",
        worktrees=tmp_path,
    )
    for sha in ("aaaaaaa", "bbbbbbb"):
        rev = ab.Revision.__new__(ab.Revision)
        rev.sha, rev.spec, rev.path = sha, sha, tmp_path / f"old-{sha}"
        with contextlib.suppress(SystemExit):
            ab.run_once(rev, args, "postgresql://postgres:@/postgres?host=/x")

    (first, cwd_a, env_a), (second, cwd_b, env_b) = commands
    assert first[:2] == ["flock", "/work/bench.lock"]
    assert "LOADAVG" in first[4]  # read once the lock is held
    tail_a, tail_b = first[first.index("-m") :], second[second.index("-m") :]
    assert tail_a[: tail_a.index("--dbname")] == tail_b[: tail_b.index("--dbname")]
    assert tail_a[:13] == [
        "-m", "bench.run", "--only", "hot,spread", "--connections", "16", "--duration", "8",
        "--quiet-wait", "0", "--no-docs", "--dbname", "skincare_bench_ab_aaaaaaa",
    ]  # fmt: skip
    assert (cwd_a, cwd_b) == (tmp_path / "old-aaaaaaa", tmp_path / "old-bbbbbbb")
    assert env_a["DATABASE_URL"] == env_b["DATABASE_URL"]  # one server for every revision


def _with_other(row: dict, other: float) -> dict:
    for scenario in ("hot", "spread"):
        row[scenario]["other_cpu_pct"] = other
    return row


def test_a_run_that_other_processes_disturbed_is_repeated_and_the_last_kept(monkeypatch) -> None:
    others = iter([140.0, 90.0, 10.0, 5.0])
    calls = []

    def fake_run_once(rev, args, url):
        calls.append(rev)
        return _with_other(_run("aaaaaaa", 400, 1.0), next(others))

    monkeypatch.setattr(ab, "run_once", fake_run_once)
    args = argparse.Namespace(scenarios=["hot", "spread"], max_other=25.0, retries=2)

    row = ab.clean_run(_Rev("aaaaaaa"), args, "url")

    assert len(calls) == 3 and row["attempt"] == 3 and ab.other_cpu(row, args.scenarios) == 10.0
    args.retries = 0
    assert ab.clean_run(_Rev("aaaaaaa"), args, "url")["attempt"] == 1  # 5 %: clean at once


def test_the_report_leaves_out_the_disturbed_runs(tmp_path: Path) -> None:
    saved = tmp_path / "ab.json"
    runs = [_with_other(_run("aaaaaaa", 400, 1.0), 5.0), _with_other(_run("aaaaaaa", 100, 3.0), 120.0)]
    revisions = [{"sha": "aaaaaaa", "label": "aaaaaaa", "subject": "s"}]
    saved.write_text(__import__("json").dumps({"revisions": revisions, "runs": runs}))

    clean = ab.report([saved], ["hot", "spread"], max_other=25.0)
    every = ab.report([saved], ["hot", "spread"], max_other=1000.0)

    assert "**400** (400)" in clean and "1 of 2 runs left out" in clean
    assert "**250** (400, 100)" in every and "0 of 2 runs left out" in every
