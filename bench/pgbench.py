"""The one pgbench runner: every pgbench cell is ``run_pgbench`` (a script from bench.scripts, ``-c`` clients for
``-T`` seconds, ``-M prepared`` or ``simple``), sampled while it runs (bench.sampling: PostgreSQL's CPU from /proc)
and read by ``parse_pgbench`` and ``latency_percentiles``.

``-M prepared`` is what the service does on a direct connection (server-side prepared statements); ``-M simple``
inlines the values in the text, as Django's client-side binding (behind PgBouncer) sends them.
"""

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from bench.sampling import wait_sampling
from bench.scripts import FALLBACK_SEQUENCE, variables
from bench.tools import pg_bindir
from devtools.processes import RESULTS, ROOT, parse_qs_host, query


def parse_pgbench(out: str) -> dict[str, Any]:
    """pgbench's summary: transactions per second (without the initial connection time) and the failed ones."""
    tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
    if not tps:
        raise ValueError(f"no tps line in pgbench's output:\n{out}")
    failed = re.search(r"number of failed transactions: (\d+)", out)
    processed = re.search(r"number of transactions actually processed: (\d+)", out)
    return {
        "per_s": round(float(tps.group(1)), 1),
        "processed": int(processed.group(1)) if processed else 0,
        "failed": int(failed.group(1)) if failed else 0,
    }


def latency_percentiles(log_lines: list[str]) -> dict[str, float | None]:
    """p50 and p99 in ms from pgbench's per-transaction log (``-l``: the third field is the latency in µs; a failed
    transaction logs a word there and is left out)."""
    latencies = sorted(
        int(parts[2]) for parts in (line.split() for line in log_lines) if len(parts) >= 3 and parts[2].isdigit()
    )

    def pct(q: float) -> float | None:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] / 1000 if latencies else None

    return {"p50_ms": pct(0.50), "p99_ms": pct(0.99)}


def prepare(url: str) -> None:
    """The sequence a service script counts its unscripted full passes in (idempotent)."""
    import psycopg

    with psycopg.connect(url.replace("postgres://", "postgresql://", 1), autocommit=True) as conn:
        conn.execute(f"CREATE SEQUENCE IF NOT EXISTS {FALLBACK_SEQUENCE}")


def _fallbacks(url: str) -> int:
    return int(query(url, f"SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {FALLBACK_SEQUENCE}")[0][0])


def run_pgbench(
    url: str, name: str, script: str, *, duration: int, clients: int, query_mode: str = "prepared"
) -> dict[str, Any]:
    """pgbench running ``script`` for ``duration`` s with ``clients`` clients; the cell: per second, p50/p99, the
    PostgreSQL CPU per transaction (ms), the failed transactions and unscripted full passes (``errors``)."""
    conn = parse_qs_host(url)
    path = RESULTS / f"pgbench-{name}.sql"
    path.parent.mkdir(exist_ok=True)
    path.write_text(script)
    logdir = RESULTS / f"pgbench-{name}"
    shutil.rmtree(logdir, ignore_errors=True)
    logdir.mkdir(parents=True)
    fallbacks = _fallbacks(url)
    cmd = [
        str(Path(pg_bindir()) / "pgbench"),
        "-h", conn["host"], "-p", conn["port"], "-U", conn["user"],
        "-n", "-M", query_mode, "-c", str(clients), "-j", "2", "-T", str(duration),
        "-f", str(path), "-l", "--log-prefix", str(logdir / "tx"),
        *variables(query_mode), conn["dbname"],
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    resources = wait_sampling(proc, ())
    assert proc.stdout is not None
    out = proc.stdout.read()
    if proc.returncode != 0:
        raise SystemExit(f"pgbench failed ({proc.returncode}):\n{out}")
    cell = parse_pgbench(out)
    lines = [line for log in logdir.iterdir() for line in log.read_text().splitlines()]
    shutil.rmtree(logdir, ignore_errors=True)
    done = cell["processed"] or 1
    return {
        "per_s": cell["per_s"],
        **latency_percentiles(lines),
        "python_cpu_ms": None,
        "pg_cpu_ms": round(1000 * resources["postgres_cpu_s"] / done, 3),
        "status_5xx": 0,
        "errors": cell["failed"] + _fallbacks(url) - fallbacks,
        "loadgen_cpu_pct": resources["loadgen_cpu_pct"],
        "other_cpu_pct": resources["other_cpu_pct"],
    }
