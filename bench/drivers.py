"""The load drivers: one scenario run each, sampled (bench.sampling) and summarised as one result dict.

* the limit: pgbench running the checkout transaction as raw SQL (``LIMITS``, ``pgbench_script``, ``run_pgbench``);
* the stack: wrk + bench/checkout.lua through gunicorn (``STACK``, ``run_wrk``);
* ``audit``: ``manage.py audit_inventory`` after every run.
"""

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from bench.sampling import wait_sampling
from bench.seeding import HOT, SOLD_OUT, SPREAD_COUNT, SPREAD_FIRST
from bench.tools import pg_bindir
from devtools.processes import RESULTS, ROOT, manage, parse_qs_host

STACK = ["hot", "spread", "multi", "soldout", "healthz"]
LIMITS = ["limit-hot", "limit-spread", "limit-hot-seed-order"]

PGBENCH_PRODUCT = {
    "limit-hot": f"\\set pid {HOT}",
    "limit-spread": f"\\set pid random({SPREAD_FIRST}, {SPREAD_FIRST + SPREAD_COUNT - 1})",
}
PGBENCH_PRODUCT["limit-hot-seed-order"] = PGBENCH_PRODUCT["limit-hot"]
# The seed's checkout transaction on this schema (see pgbench_script), as one raw-SQL transaction.
SQL_HEAD = """BEGIN;
SELECT price, now() AS db_now FROM products WHERE id = :pid AND is_active \\gset
INSERT INTO orders (customer_id, status, payment_expires_at, total, created_at, updated_at) VALUES (:cust, 'pending_payment', now() + interval '1800 seconds', :price, now(), now()) RETURNING id AS order_id \\gset
"""
SQL_REST = [
    "INSERT INTO order_lines (order_id, product_id, qty, unit_price) VALUES (:order_id, :pid, 1, :price);",
    "INSERT INTO inventory_reservations (order_id, product_id, bucket, qty, status, expires_at, created_at, updated_at) VALUES (:order_id, :pid, 0, 1, 'active', now() + interval '1800 seconds', now(), now());",
    "INSERT INTO payment_attempts (order_id, status, amount, provider_reference, created_at, updated_at) VALUES (:order_id, 'pending', :price, '', now(), now());",
    "INSERT INTO stock_movements (product_id, available_delta, reserved_delta, reason, order_id, note, created_at) VALUES (:pid, -1, 1, 'reserve', :order_id, '', now());",
]
SQL_GUARDED_UPDATE = "UPDATE stock_buckets SET available_stock = available_stock - 1, reserved_stock = reserved_stock + 1, version = version + 1, updated_at = now() WHERE product_id = :pid AND available_stock >= 1;"


def pgbench_script(name: str, customer_id: int) -> str:
    """``limit-hot-seed-order`` and ``limit-spread``: the seed's checkout transaction as the seed writes it (order,
    guarded UPDATE right after it, then the reservation, the payment attempt, plus this schema's line and ledger
    row), a fixed reference that does not move when the service's statements change. ``limit-hot``: the service's
    own statements today (quote read, one INSERT statement, guarded UPDATE last: bench.strategies, guarded_update)."""
    if name == "limit-hot":
        from bench.strategies import pgbench_script as service_script  # bench.strategies imports this module

        return service_script("guarded_update", "hot", customer_id)
    rest = [SQL_GUARDED_UPDATE, *SQL_REST]  # the seed's order: the row lock is taken second and held for the rest
    return f"{PGBENCH_PRODUCT[name]}\n\\set cust {customer_id}\n{SQL_HEAD}" + "\n".join(rest) + "\nCOMMIT;\n"


def wrk_env(mode: str, tokens_file: Path) -> dict[str, str]:
    """The environment bench/checkout.lua reads: scenario, tokens file, product ids."""
    return dict(
        os.environ,
        BENCH_MODE=mode,
        BENCH_TOKENS=str(tokens_file),
        BENCH_PRODUCT=str(SOLD_OUT if mode == "soldout" else HOT),
        BENCH_SPREAD_FIRST=str(SPREAD_FIRST),
        BENCH_SPREAD_COUNT=str(SPREAD_COUNT),
    )


def wrk_command(base: str, *, duration: int, connections: int) -> list[str]:
    return ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--timeout", "10s", "-s", "bench/checkout.lua", base]


def _run_sampled(
    cmd: list[str], workers: Iterable[int], env: dict[str, str] | None = None
) -> tuple[int | None, str, dict[str, Any]]:
    """Run the load generator ``cmd`` to its end while sampling; returns its exit code, output and the resources."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    resources = wait_sampling(proc, workers)
    assert proc.stdout is not None
    return proc.returncode, proc.stdout.read(), resources


def run_wrk(
    base: str, mode: str, *, duration: int, connections: int, tokens_file: Path, workers: Iterable[int]
) -> dict[str, Any]:
    cmd = wrk_command(base, duration=duration, connections=connections)
    returncode, out, resources = _run_sampled(cmd, workers, env=wrk_env(mode, tokens_file))
    match = re.search(r"BENCH_JSON (\{.*\})", out)
    if returncode != 0 or not match:
        raise SystemExit(f"wrk failed ({returncode}):\n{out}")
    raw = json.loads(match.group(1))
    seconds = raw["duration_us"] / 1e6
    errors = raw["connect_errors"] + raw["read_errors"] + raw["write_errors"] + raw["timeouts"]
    ok = raw["s2xx"] + raw["s201"] if mode == "healthz" else raw["s201"]
    served = raw["requests"] / seconds
    app_cpu = sum(resources["worker_cpu_pct"]) + resources["postgres_cpu_pct"]  # % of one core
    resources["cpu_ms_per_request"] = round(10 * app_cpu / served, 2) if served else None
    return {
        "kind": "stack",
        "requests": raw["requests"],
        "seconds": round(seconds, 2),
        "ok_per_s": round(ok / seconds, 1),
        "conflicts_per_s": round(raw["s409"] / seconds, 1),
        "rps": round(raw["requests"] / seconds, 1),
        "p50_ms": raw["p50_us"] / 1000,
        "p95_ms": raw["p95_us"] / 1000,
        "p99_ms": raw["p99_us"] / 1000,
        "status_5xx": raw["s5xx"],
        "status_4xx_other": raw["s4xx"] + raw["sother"],
        "socket_errors": errors,
        "status_201": raw["s201"],
        "status_409": raw["s409"],
        # 409s and 503s by code (bench/checkout.lua): NOWAIT refusals, optimistic give-ups, 503 busy
        "status_409_lock_busy": raw.get("s409_lock_busy", 0),
        "status_409_gave_up": raw.get("s409_gave_up", 0),
        "status_503_busy": raw.get("s503_busy", 0),
        **resources,
    }


def _pgbench_count(out: str, label: str) -> int:
    """A count from pgbench's summary (``<label>: N``), 0 when pgbench did not print it."""
    match = re.search(rf"{re.escape(label)}: (\d+)", out)
    return int(match.group(1)) if match else 0


def run_pgbench(
    url: str,
    name: str,
    *,
    duration: int,
    connections: int,
    customer_id: int,
    script_text: str | None = None,
    extra_args: Sequence[str] = (),
    query_mode: str = "prepared",
) -> dict[str, Any]:
    """pgbench for ``duration`` s running ``script_text`` (default: ``pgbench_script(name)``, a LIMITS scenario)
    with ``extra_args`` (e.g. ``--max-tries``), in pgbench's ``query_mode`` (``-M``: prepared = server-side prepared
    statements, simple = the values inlined in the text, as Django's client-side binding sends them); failed transactions (pgbench 15+: serialization/deadlock errors
    after the last try) are counted, not timed."""
    conn = parse_qs_host(url)
    script = RESULTS / f"{name}.sql"
    script.write_text(script_text if script_text is not None else pgbench_script(name, customer_id))
    logdir = RESULTS / f"pgbench-{name}"
    shutil.rmtree(logdir, ignore_errors=True)
    logdir.mkdir(parents=True)
    cmd = [
        str(Path(pg_bindir()) / "pgbench"),
        "-h", conn["host"], "-p", conn["port"], "-U", conn["user"],
        "-n", "-M", query_mode, "-c", str(connections), "-j", "2", "-T", str(duration),
        "-f", str(script), "-l", "--log-prefix", str(logdir / "tx"), *extra_args, conn["dbname"],
    ]  # fmt: skip
    returncode, out, resources = _run_sampled(cmd, ())
    tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
    if returncode != 0 or not tps:
        raise SystemExit(f"pgbench failed ({returncode}):\n{out}")
    failed = re.search(r"number of failed transactions: (\d+)", out)
    latencies = []
    for path in logdir.iterdir():
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[2].isdigit():  # a failed transaction logs "failed"/"serialization"/...
                latencies.append(int(parts[2]))
    latencies.sort()
    pct = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] / 1000 if latencies else None  # noqa: E731
    shutil.rmtree(logdir, ignore_errors=True)
    resources["cpu_ms_per_request"] = round(10 * resources["postgres_cpu_pct"] / float(tps.group(1)), 2)
    return {
        "kind": "limit",
        "requests": len(latencies),
        "seconds": duration,
        "ok_per_s": round(float(tps.group(1)), 1),
        "conflicts_per_s": 0.0,
        "rps": round(float(tps.group(1)), 1),
        "p50_ms": pct(0.50),
        "p95_ms": pct(0.95),
        "p99_ms": pct(0.99),
        "status_5xx": 0,
        "status_4xx_other": 0,
        "socket_errors": int(failed.group(1)) if failed else 0,
        "processed": _pgbench_count(out, "number of transactions actually processed"),
        "failed": int(failed.group(1)) if failed else 0,
        "serialization_failures": _pgbench_count(out, "number of serialization failures"),
        "deadlock_failures": _pgbench_count(out, "number of deadlock failures"),
        "retried": _pgbench_count(out, "number of transactions retried"),
        "retries": _pgbench_count(out, "total number of retries"),
        **resources,
    }


def audit(url: str) -> bool:
    """``manage.py audit_inventory``; prints its output when it finds a violation."""
    proc = manage(url, "audit_inventory", check=False, quiet=True)
    ok = proc.returncode == 0
    if not ok:
        print(proc.stdout + proc.stderr, flush=True)
    return ok
