"""The one results table: the cells of a run (bench.cells, bench.cpu) summarised as one row each (medians over the
rounds), each with its ratio to its baseline row of the same run, the machine and the PostgreSQL settings it ran
with; written between the markers of docs/benchmarks.md (``write_block``), replacing the previous run's."""

import contextlib
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from devtools.processes import ROOT, admin_conninfo

DOCS = ROOT / "docs" / "benchmarks.md"
MARK_START, MARK_END = "<!-- bench:table:start -->", "<!-- bench:table:end -->"
FIGURES = ("per_s", "p99_ms", "python_cpu_ms", "pg_cpu_ms", "other_cpu_pct")
PG_SETTINGS = ("server_version", "fsync", "synchronous_commit", "shared_buffers", "max_connections", "jit")


def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarise(cells: list[dict[str, Any]], baselines: dict[str, str | None]) -> list[dict[str, Any]]:
    """One row per row label (in ``baselines``' order, the rows that ran): the medians of each figure over the
    rounds, the errors and 5xx summed, the worst audit, the baseline's label."""
    rows = []
    for label, baseline in baselines.items():
        runs = [c for c in cells if c["row"] == label]
        if not runs:
            continue
        row: dict[str, Any] = {"row": label, "baseline": baseline, "rounds": len(runs)}
        row.update({key: _median(c.get(key) for c in runs) for key in FIGURES})
        row["errors"] = sum(c.get("errors", 0) + c.get("status_5xx", 0) for c in runs)
        row["audit_clean"] = all(c.get("audit_clean", True) for c in runs)
        rows.append(row)
    return rows


def _cpu(row: dict[str, Any]) -> float | None:
    """CPU per operation: Python's and PostgreSQL's, whichever were measured."""
    parts = [row[key] for key in ("python_cpu_ms", "pg_cpu_ms") if row.get(key) is not None]
    return sum(parts) if parts else None


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row with ``ratio_per_s`` and ``ratio_cpu`` (its figure ÷ its baseline row's), None without a baseline."""
    by_label = {row["row"]: row for row in rows}
    out = []
    for row in rows:
        base = by_label.get(row["baseline"] or "")
        per_s = row["per_s"] / base["per_s"] if base and row["per_s"] and base["per_s"] else None
        mine, theirs = _cpu(row), _cpu(base) if base else None
        cpu = mine / theirs if mine and theirs else None
        out.append({**row, "ratio_per_s": per_s, "ratio_cpu": cpu})
    return out


def _fmt(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def markdown(rows: list[dict[str, Any]], header: str) -> str:
    """``header`` (the run and the machine), then the table."""
    lines = [
        header,
        "",
        "| row | per second | p99 ms | Python CPU ms | PostgreSQL CPU ms | baseline (same run) | ratio per second | ratio CPU "
        "| errors | others' CPU % |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for row in ratios(rows):
        lines.append(
            f"| {row['row']} | {_fmt(row['per_s'])} | {_fmt(row['p99_ms'], 1)} | {_fmt(row['python_cpu_ms'], 3)} "
            f"| {_fmt(row['pg_cpu_ms'], 3)} | {row['baseline'] or '(reference)'} | {_fmt(row['ratio_per_s'], 2)} "
            f"| {_fmt(row['ratio_cpu'], 2)} | {row['errors']}{'' if row['audit_clean'] else ', audit FAILED'} "
            f"| {_fmt(row['other_cpu_pct'])} |"
        )
    return "\n".join(lines)


def write_block(block: str, path: Path = DOCS) -> None:
    """Replace what stands between the markers of ``path`` with ``block``; the markers must be there."""
    text = path.read_text()
    if MARK_START not in text or MARK_END not in text:
        raise SystemExit(f"{path} has no {MARK_START} … {MARK_END} markers")
    head, _, rest = text.partition(MARK_START)
    _, _, tail = rest.partition(MARK_END)
    path.write_text(f"{head}{MARK_START}\n{block}\n{MARK_END}{tail}")


def machine() -> dict[str, Any]:
    """CPU model, cores, memory, kernel, Python; the date and the commit measured."""
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": commit.stdout.strip() or "unknown",
    }


def server_settings(url: str) -> dict[str, str]:
    """The PostgreSQL settings that matter for these figures (SHOW gives them with their units)."""
    import psycopg

    with psycopg.connect(admin_conninfo(url)) as conn:
        return {name: str(conn.execute(f"SHOW {name}").fetchall()[0][0]) for name in PG_SETTINGS}


def header(facts: dict[str, Any], settings: dict[str, str], run: str) -> str:
    """Two lines above the table: the run, then the machine and the server."""
    pg = ", ".join(f"{k} {v}" for k, v in settings.items())
    return (
        f"{run}\n\nMachine: {facts['cpu']}, {facts['cores']} cores, {facts['memory_gb']} GB, Linux {facts['kernel']}, "
        f"Python {facts['python']}; {facts['date']}, commit {facts['commit']}. PostgreSQL: {pg}."
    )
