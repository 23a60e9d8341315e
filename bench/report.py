"""Reporting: the stack/limit ratios, the markdown results block (and the ``--matrix`` table), the chart
docs/img/bench.png, rewriting the results block of docs/benchmarks.md (between the bench:results markers), and
the PostgreSQL settings and machine facts recorded with a run."""

import contextlib
import platform
from pathlib import Path
from typing import Any

from devtools.processes import ROOT, admin_conninfo

DOCS = ROOT / "docs" / "benchmarks.md"
CHART = ROOT / "docs" / "img" / "bench.png"
MARK_START, MARK_END = "<!-- bench:results:start -->", "<!-- bench:results:end -->"

LABELS = {
    "limit-hot": "pgbench hot, the service's own statements",
    "limit-spread": "pgbench spread (1000 products), the seed's transaction",
    "limit-hot-seed-order": "pgbench hot, the seed's transaction (the reference)",
    "hot": "HTTP hot SKU",
    "spread": "HTTP spread SKUs",
    "multi": "HTTP multi-item carts (3)",
    "soldout": "HTTP sold-out flood (409)",
    "healthz": "HTTP /healthz",
}


def ratios(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Stack throughput over its limit (hot, spread) and the sold-out flood over /healthz, with the goals."""
    get = lambda name, key: results.get(name, {}).get(key)  # noqa: E731
    out = {}
    for stack, limit, goal in (
        ("hot", "limit-hot-seed-order", 0.6),  # the target: against the seed's transaction, a fixed reference
        ("hot", "limit-hot", 0.6),  # the second line: against the service's own statements in pgbench
        ("spread", "limit-spread", 0.3),
        ("soldout", "healthz", 0.5),
    ):
        num = get(stack, "conflicts_per_s" if stack == "soldout" else "ok_per_s")
        den = get(limit, "rps" if limit == "healthz" else "ok_per_s")
        if num is not None and den:
            out[f"{stack} / {limit}"] = {"ratio": round(num / den, 3), "goal": goal, "met": num / den >= goal}
    return out


def markdown(report: dict[str, Any]) -> str:
    """The results block of docs/benchmarks.md for one run (``report`` as written to bench-results/bench.json)."""
    lines = [
        f"Run of {report['started']} ({report['duration_s']} s per scenario, {report['connections']} concurrent "
        f"connections; gunicorn: {report['gunicorn']}).",
        "",
        "| scenario | reservations/s | 409/s | p50 ms | p95 ms | p99 ms | 5xx | errors | CPU % per worker (mean) "
        "| peak RSS MB per worker (max) | PostgreSQL CPU % | CPU ms per request (workers + PostgreSQL) | load generator CPU % | other processes CPU % | machine CPU % (of 200) | audit |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, r in report["results"].items():
        fmt = lambda v: "-" if v is None else (f"{v:.1f}" if isinstance(v, float) else str(v))  # noqa: E731
        ok = r["ok_per_s"] if name != "healthz" else None
        lines.append(
            f"| {LABELS.get(name, name)} | {fmt(ok)} | {fmt(r['conflicts_per_s']) if name == 'soldout' else ('-' if name == 'healthz' else fmt(r['conflicts_per_s']))} "
            f"| {fmt(r['p50_ms'])} | {fmt(r['p95_ms'])} | {fmt(r['p99_ms'])} | {r['status_5xx']} | "
            f"{r['socket_errors'] + r['status_4xx_other']} | {fmt(r['worker_cpu_pct_mean'])} | {fmt(r['worker_peak_rss_mb_max'])} "
            f"| {fmt(r['postgres_cpu_pct'])} | {fmt(r['cpu_ms_per_request'])} | {fmt(r['loadgen_cpu_pct'])} | {fmt(r['other_cpu_pct'])} | {fmt(r['machine_cpu_pct'])} | "
            f"{'clean' if r['audit_clean'] else 'FAILED'} |"
        )
    if "healthz" in report["results"]:
        lines.append("")
        lines.append(
            f"/healthz: {report['results']['healthz']['rps']:.1f} requests/s (the baseline for the sold-out flood)."
        )
    lines += ["", "| ratio | value | goal | met |", "|---|---:|---:|---|"]
    for name, r in report["ratios"].items():
        lines.append(f"| {name} | {r['ratio']:.2f} | ≥ {r['goal']} | {'yes' if r['met'] else 'NO'} |")
    p99 = [r["p99_ms"] for name, r in report["results"].items() if r["kind"] == "stack"]
    five = sum(r["status_5xx"] for r in report["results"].values())
    lines += [
        "",
        f"p99 < 250 ms at {report['connections']} connections (HTTP scenarios): "
        f"{'met' if p99 and max(p99) < 250 else 'NOT met'} (worst {max(p99) if p99 else 0:.1f} ms); "
        f"5xx: {five}; audit after every run: {'clean' if all(r['audit_clean'] for r in report['results'].values()) else 'FAILED'}.",
        "",
        "Server settings: " + ", ".join(f"{k}={v}" for k, v in sorted(report["server_settings"].items())) + ".",
        "Machine: " + ", ".join(f"{k}={v}" for k, v in report["machine"].items()) + ".",
    ]
    return "\n".join(lines)


def matrix_markdown(rows: list[dict[str, Any]], names: list[str]) -> str:
    """The ``--matrix`` table: one row per gunicorn configuration, one column per scenario."""
    lines = [
        "| config | "
        + " | ".join(f"{n} ok/s (p99 ms) [CPU ms/req]" for n in names)
        + " | other processes CPU % (hot) |",
        "|---|" + "---:|" * (len(names) + 1),
    ]
    for row in rows:
        cells = []
        for n in names:
            r = row["results"][n]
            v = r["conflicts_per_s"] if n == "soldout" else (r["rps"] if n == "healthz" else r["ok_per_s"])
            cells.append(f"{v:.0f} ({r['p99_ms']:.0f}) [{r.get('cpu_ms_per_request')}]")
        hot = row["results"].get("hot", {})
        lines.append(f"| {row['config']} | " + " | ".join(cells) + f" | {hot.get('other_cpu_pct')} |")
    return "\n".join(lines)


def chart(report: dict[str, Any], path: Path = CHART) -> None:
    """Throughput and p99 per scenario, side by side, as a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["results"])
    results = report["results"]
    values = [
        results[n]["conflicts_per_s"] if n == "soldout" else results[n]["rps" if n == "healthz" else "ok_per_s"]
        for n in names
    ]
    colors = [
        "#8c8c8c" if results[n]["kind"] == "limit" else ("#4c72b0" if n not in ("soldout", "healthz") else "#dd8452")
        for n in names
    ]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5.2))
    labels = [LABELS.get(n, n).replace(" (", "\n(").replace(", ", ",\n") for n in names]
    bars = ax1.bar(range(len(names)), values, color=colors)
    ax1.bar_label(bars, fmt="%.0f", fontsize=8)
    ax1.set_xticks(range(len(names)), labels, rotation=45, ha="right", fontsize=8)
    ax1.set_ylabel("per second (reservations; 409s for sold-out; requests for /healthz)")
    ax1.set_title("Throughput (grey: raw-SQL limit)")
    p99 = [results[n]["p99_ms"] or 0 for n in names]
    bars = ax2.bar(range(len(names)), p99, color=colors)
    ax2.bar_label(bars, fmt="%.0f", fontsize=8)
    ax2.axhline(250, color="red", linestyle="--", linewidth=1, label="goal: p99 < 250 ms")
    ax2.set_xticks(range(len(names)), labels, rotation=45, ha="right", fontsize=8)
    ax2.set_ylabel("p99 latency (ms)")
    ax2.set_title(f"p99 at {report['connections']} concurrent connections")
    ax2.legend(fontsize=8)
    fig.suptitle(f"Flash-sale checkout benchmark ({report['gunicorn']}; 2 cores)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def update_docs(block: str, path: Path = DOCS, *, start: str = MARK_START, end: str = MARK_END) -> None:
    """Replace what stands between the ``start``/``end`` markers of ``path`` with ``block`` (markers added if
    missing). The results block by default; bench.run also writes bench.cpu's table between its own markers."""
    text = path.read_text() if path.exists() else f"# Benchmarks\n\n{start}\n{end}\n"
    if start not in text:
        text += f"\n{start}\n{end}\n"
    head, _, rest = text.partition(start)
    _, _, tail = rest.partition(end)
    path.write_text(f"{head}{start}\n{block}\n{end}{tail}")


def server_settings(url: str) -> dict[str, str]:
    """The PostgreSQL settings the run used (SHOW gives them with their units)."""
    import psycopg

    names = ("server_version", "fsync", "synchronous_commit", "full_page_writes", "wal_level", "shared_buffers",
             "max_connections", "work_mem", "max_wal_size", "checkpoint_timeout", "jit")  # fmt: skip
    with psycopg.connect(admin_conninfo(url)) as conn:
        return {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in names}


def machine_info() -> dict[str, Any]:
    """CPU model, cores, memory, kernel and Python version of this machine."""
    import psutil

    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": cpu,
        "cores": psutil.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }
