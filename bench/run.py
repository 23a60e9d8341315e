"""``make bench``: the throughput benchmark, in ONE run on ONE database (skincare_bench, created afresh).

1. The limit: pgbench runs the checkout transaction as raw SQL on the project's real tables (the same statements
   the service sends: product/price read, order, order line, reservation, payment attempt, ledger row, guarded
   inventory UPDATE last), at the same concurrency as the HTTP runs: hot (one product) and spread (1000
   products); plus the seed's statement order (guarded UPDATE right after the order insert) on the hot product.
2. The stack: wrk + bench/checkout.lua through gunicorn: hot SKU, spread SKUs, multi-item carts (3 products),
   a sold-out flood (stock 0, every answer a 409) and GET /healthz (the baseline for the sold-out flood).

After every run: ``manage.py audit_inventory``. Reported: successful reservations/s, 409s/s, p50/p95/p99,
errors, CPU and peak RSS per gunicorn worker (psutil), PostgreSQL CPU, the stack/limit ratios.
Writes bench-results/bench.json, docs/img/bench.png, and the results block of docs/benchmarks.md.

    python -m bench.run                       # the full run (about 4 minutes)
    python -m bench.run --duration 10 --only hot,soldout,healthz --workers 4 --no-docs
    python -m bench.run --matrix              # the configuration experiments recorded in docs/benchmarks.md
    python -m bench.run --profile             # py-spy on one worker during the hot run
"""

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.common import RESULTS, ROOT, Gunicorn, ctl, flash_sale_setup, log, manage, parse_qs_host, recreate_database
from bench.common import server_url as db_url

HOT = 101
SOLD_OUT = 900
SPREAD_FIRST, SPREAD_COUNT = 2001, 1000
STOCK_BIG = 10_000_000
DOCS = ROOT / "docs" / "benchmarks.md"
CHART = ROOT / "docs" / "img" / "bench.png"
MARK_START, MARK_END = "<!-- bench:results:start -->", "<!-- bench:results:end -->"

STACK = ["hot", "spread", "multi", "soldout", "healthz"]
LIMITS = ["limit-hot", "limit-spread", "limit-hot-seed-order"]

PGBENCH_PRODUCT = {
    "limit-hot": f"\\set pid {HOT}",
    "limit-spread": f"\\set pid random({SPREAD_FIRST}, {SPREAD_FIRST + SPREAD_COUNT - 1})",
}
PGBENCH_PRODUCT["limit-hot-seed-order"] = PGBENCH_PRODUCT["limit-hot"]
# The statements payments.services.checkout sends (see docs/benchmarks.md), as one raw-SQL transaction.
SQL_HEAD = """BEGIN;
SELECT price, now() AS db_now FROM products WHERE id = :pid AND is_active \\gset
INSERT INTO orders (customer_id, status, payment_expires_at, total, created_at, updated_at) VALUES (:cust, 'pending_payment', now() + interval '1800 seconds', :price, now(), now()) RETURNING id AS order_id \\gset
"""
SQL_REST = [
    "INSERT INTO order_lines (order_id, product_id, qty, unit_price) VALUES (:order_id, :pid, 1, :price);",
    "INSERT INTO inventory_reservations (order_id, product_id, qty, status, expires_at, created_at, updated_at) VALUES (:order_id, :pid, 1, 'active', now() + interval '1800 seconds', now(), now());",
    "INSERT INTO payment_attempts (order_id, status, amount, provider_reference, created_at, updated_at) VALUES (:order_id, 'pending', :price, '', now(), now());",
    "INSERT INTO stock_movements (product_id, available_delta, reserved_delta, reason, order_id, note, created_at) VALUES (:pid, -1, 1, 'reserve', :order_id, '', now());",
]
SQL_GUARDED_UPDATE = "UPDATE inventories SET available_stock = available_stock - 1, reserved_stock = reserved_stock + 1, version = version + 1, updated_at = now() WHERE product_id = :pid AND available_stock >= 1;"


def pgbench_script(name, customer_id):
    rest = [*SQL_REST, SQL_GUARDED_UPDATE]
    if name == "limit-hot-seed-order":  # the seed's order: the row lock is taken second and held for the rest
        rest = [SQL_GUARDED_UPDATE, *SQL_REST]
    return f"{PGBENCH_PRODUCT[name]}\n\\set cust {customer_id}\n{SQL_HEAD}" + "\n".join(rest) + "\nCOMMIT;\n"


# --- tools ------------------------------------------------------------------------------------------------


def ensure_tools(need_pyspy=False):
    if not shutil.which("wrk"):
        if os.geteuid() != 0 or not shutil.which("apt-get"):
            raise SystemExit("wrk is missing: install the Debian package `wrk` (apt-get install wrk)")
        log("installing wrk (apt-get)")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], check=False, env=env, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", "-o", "DPkg::Lock::Timeout=300", "wrk"], check=True, env=env)
    missing = []
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        missing.append("matplotlib")
    if need_pyspy and not (ROOT / ".venv/bin/py-spy").exists():
        missing.append("py-spy")
    if missing:
        log(f"installing {', '.join(missing)} from requirements-bench.txt into .venv")
        subprocess.run(
            [str(ROOT / ".venv/bin/python"), "-m", "pip", "install", "--quiet", "-r", "requirements-bench.txt"],
            cwd=ROOT,
            check=True,
        )


def pg_bindir():
    return subprocess.run(
        [sys.executable, "-m", "skincare.devdb", "bindir"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


# --- resource sampling -------------------------------------------------------------------------------------


class Sampler:
    """CPU (from cpu_times deltas) and peak RSS (sampled every 0.25 s) of the gunicorn workers, PostgreSQL
    (postmaster, live backends and the backends that exited meanwhile), the load generator, and the machine."""

    def __init__(self, worker_pids=(), loadgen_pid=None):
        import psutil

        self.psutil = psutil
        self.workers = [psutil.Process(pid) for pid in worker_pids]
        self.loadgen = psutil.Process(loadgen_pid) if loadgen_pid else None
        self.postmaster = self._postmaster()
        self.peak_rss = {p.pid: 0 for p in self.workers}
        self._stop = threading.Event()

    def _postmaster(self):
        with contextlib.suppress(Exception):
            pid = int((ROOT / ".data/pg/postmaster.pid").read_text().split()[0])
            return self.psutil.Process(pid)
        return None

    def _pg_cpu(self):
        if self.postmaster is None:
            return 0.0
        t = self.postmaster.cpu_times()
        total = t.user + t.system + t.children_user + t.children_system
        for child in self.postmaster.children():
            with contextlib.suppress(self.psutil.NoSuchProcess):
                c = child.cpu_times()
                total += c.user + c.system
        return total

    def _cpu(self, proc):
        with contextlib.suppress(self.psutil.NoSuchProcess):
            t = proc.cpu_times()
            return t.user + t.system
        return 0.0

    def _loop(self):
        while not self._stop.wait(0.25):
            for p in self.workers:
                with contextlib.suppress(self.psutil.NoSuchProcess):
                    self.peak_rss[p.pid] = max(self.peak_rss[p.pid], p.memory_info().rss)

    def start(self):
        self.t0 = time.monotonic()
        self.w0 = {p.pid: self._cpu(p) for p in self.workers}
        self.pg0 = self._pg_cpu()
        self.lg0 = self._cpu(self.loadgen) if self.loadgen else 0.0
        self.sys0 = self.psutil.cpu_times()
        for p in self.workers:
            with contextlib.suppress(self.psutil.NoSuchProcess):
                self.peak_rss[p.pid] = p.memory_info().rss
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()
        return self

    def finish(self, loadgen_cpu=None):
        self._stop.set()
        self.thread.join()
        elapsed = time.monotonic() - self.t0
        sys1 = self.psutil.cpu_times()
        busy = lambda t: t.user + t.system + t.nice + getattr(t, "irq", 0) + getattr(t, "softirq", 0)  # noqa: E731
        sys_busy = (busy(sys1) - busy(self.sys0)) / max((sum(sys1) - sum(self.sys0)), 1e-9)  # fraction of all cores
        worker_cpu = [100 * (self._cpu(p) - self.w0[p.pid]) / elapsed for p in self.workers]
        return {
            "worker_cpu_pct": [round(c, 1) for c in worker_cpu],
            "worker_cpu_pct_mean": round(statistics.mean(worker_cpu), 1) if worker_cpu else None,
            "worker_peak_rss_mb": [round(r / 2**20, 1) for r in self.peak_rss.values()],
            "worker_peak_rss_mb_max": round(max(self.peak_rss.values()) / 2**20, 1) if self.peak_rss else None,
            "postgres_cpu_pct": round(100 * (self._pg_cpu() - self.pg0) / elapsed, 1),
            "loadgen_cpu_pct": round(100 * loadgen_cpu / elapsed, 1) if loadgen_cpu is not None else None,
            "machine_cpu_pct": round(100 * sys_busy * self.psutil.cpu_count(), 1),  # 200 = both cores busy
        } | {
            # what neither the workers, PostgreSQL nor the load generator used: other processes on the machine
            "other_cpu_pct": round(
                max(
                    0.0,
                    100 * sys_busy * self.psutil.cpu_count()
                    - sum(worker_cpu)
                    - 100 * (self._pg_cpu() - self.pg0) / elapsed
                    - (100 * loadgen_cpu / elapsed if loadgen_cpu is not None else 0),
                ),
                1,
            )
        }


# --- runs --------------------------------------------------------------------------------------------------


def wait_sampling(proc, workers):
    """Sample the workers' and the load generator's resources until ``proc`` (the load generator) exits."""
    import psutil

    loadgen = psutil.Process(proc.pid)
    sampler = Sampler(workers, proc.pid).start()
    last_cpu = 0.0
    while proc.poll() is None:
        with contextlib.suppress(psutil.NoSuchProcess):
            t = loadgen.cpu_times()
            last_cpu = t.user + t.system
        time.sleep(0.2)
    return sampler.finish(loadgen_cpu=last_cpu)


def wait_for_quiet(max_wait):
    """Wait (at most ``max_wait`` s) until the machine is nearly idle: other jobs skew a 2-core benchmark."""
    import psutil

    deadline = time.monotonic() + max_wait
    busy = psutil.cpu_percent(interval=1.0)
    while busy > 25 and time.monotonic() < deadline:
        busy = psutil.cpu_percent(interval=2.0)
    return busy


def run_wrk(base, mode, *, duration, connections, tokens_file, workers):
    env = dict(
        os.environ,
        BENCH_MODE=mode,
        BENCH_TOKENS=str(tokens_file),
        BENCH_PRODUCT=str(SOLD_OUT if mode == "soldout" else HOT),
        BENCH_SPREAD_FIRST=str(SPREAD_FIRST),
        BENCH_SPREAD_COUNT=str(SPREAD_COUNT),
    )
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--timeout", "10s", "-s", "bench/checkout.lua", base]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    resources = wait_sampling(proc, workers)
    out = proc.stdout.read()
    match = re.search(r"BENCH_JSON (\{.*\})", out)
    if proc.returncode != 0 or not match:
        raise SystemExit(f"wrk failed ({proc.returncode}):\n{out}")
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
        **resources,
    }


def run_pgbench(url, name, *, duration, connections, customer_id):
    conn = parse_qs_host(url)
    script = RESULTS / f"{name}.sql"
    script.write_text(pgbench_script(name, customer_id))
    logdir = RESULTS / f"pgbench-{name}"
    shutil.rmtree(logdir, ignore_errors=True)
    logdir.mkdir(parents=True)
    cmd = [
        str(Path(pg_bindir()) / "pgbench"),
        "-h", conn["host"], "-p", conn["port"], "-U", conn["user"],
        "-n", "-M", "prepared", "-c", str(connections), "-j", "2", "-T", str(duration),
        "-f", str(script), "-l", "--log-prefix", str(logdir / "tx"), conn["dbname"],
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    resources = wait_sampling(proc, ())
    out = proc.stdout.read()
    tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
    if proc.returncode != 0 or not tps:
        raise SystemExit(f"pgbench failed ({proc.returncode}):\n{out}")
    failed = re.search(r"number of failed transactions: (\d+)", out)
    latencies = []
    for path in logdir.iterdir():
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3:
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
        **resources,
    }


def audit(url):
    proc = manage(url, "audit_inventory", check=False, quiet=True)
    ok = proc.returncode == 0
    if not ok:
        print(proc.stdout + proc.stderr, flush=True)
    return ok


def seed(url):
    log(f"fresh database {url.split('?')[0]}: migrate, demo data, {SPREAD_COUNT} spread products, sold-out SKU")
    recreate_database(url)
    ctl(url, "seed-spread", str(SPREAD_FIRST), str(SPREAD_COUNT), str(STOCK_BIG))
    ctl(url, "seed-product", str(SOLD_OUT), "0", "--name", "Sold-out serum (bench)")
    flash_sale_setup(url, STOCK_BIG)  # the hot SKU gets stock that cannot run out during the run
    tokens_json = RESULTS / "bench-tokens.json"
    ctl(url, "tokens", "200", "bench-customer", str(tokens_json))
    tokens_txt = RESULTS / "bench-tokens.txt"
    tokens_txt.write_text("\n".join(json.loads(tokens_json.read_text())) + "\n")
    customer_id = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c",
         "from django.contrib.auth import get_user_model; print(get_user_model().objects.get(username='bench-customer-00000').pk)"],
        cwd=ROOT, env=dict(os.environ, DATABASE_URL=url), capture_output=True, text=True, check=True,
    ).stdout.split()[-1]  # fmt: skip
    return tokens_txt, int(customer_id)


def server_settings(url):
    """The PostgreSQL settings the run used (SHOW gives them with their units)."""
    import psycopg

    from bench.common import _admin_conninfo

    names = ("server_version", "fsync", "synchronous_commit", "full_page_writes", "wal_level", "shared_buffers",
             "max_connections", "work_mem", "max_wal_size", "checkpoint_timeout", "jit")  # fmt: skip
    with psycopg.connect(_admin_conninfo(url)) as conn:
        return {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in names}


def machine_info():
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


def profile_hot(server, base, tokens_file, duration, connections):
    """py-spy on the busiest worker while the hot run is going; returns the top functions by inclusive samples."""
    out = RESULTS / "pyspy-hot.txt"
    pid = server.worker_pids()[0]
    env = dict(os.environ, BENCH_MODE="hot", BENCH_TOKENS=str(tokens_file), BENCH_PRODUCT=str(HOT))
    wrk = subprocess.Popen(
        ["wrk", "-t1", f"-c{connections}", f"-d{duration + 2}s", "--timeout", "10s", "-s", "bench/checkout.lua", base],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(1)
    subprocess.run(
        [str(ROOT / ".venv/bin/py-spy"), "record", "--pid", str(pid), "--duration", str(duration), "--rate", "250",
         "--format", "raw", "--output", str(out), "--nonblocking"],
        check=False, capture_output=True,
    )  # fmt: skip
    wrk.wait()
    return summarize_pyspy(out)


def summarize_pyspy(path):
    inclusive, total = {}, 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        seen = set()
        for frame in stack.split(";"):
            m = re.match(r"(.+?) \((.+?)(?::\d+)?\)$", frame.strip())
            key = (
                f"{m.group(1)} ({m.group(2).split('site-packages/')[-1].replace(str(ROOT) + '/', '')})" if m else frame
            )
            if key not in seen:
                seen.add(key)
                inclusive[key] = inclusive.get(key, 0) + n
    top = sorted(inclusive.items(), key=lambda kv: -kv[1])[:40]
    return {"samples": total, "top_inclusive_pct": [(k, round(100 * v / total, 1)) for k, v in top]}


# --- reporting ---------------------------------------------------------------------------------------------

LABELS = {
    "limit-hot": "pgbench hot (1 product)",
    "limit-spread": "pgbench spread (1000 products)",
    "limit-hot-seed-order": "pgbench hot, seed statement order",
    "hot": "HTTP hot SKU",
    "spread": "HTTP spread SKUs",
    "multi": "HTTP multi-item carts (3)",
    "soldout": "HTTP sold-out flood (409)",
    "healthz": "HTTP /healthz",
}


def ratios(results):
    get = lambda name, key: results.get(name, {}).get(key)  # noqa: E731
    out = {}
    for stack, limit, goal in (
        ("hot", "limit-hot", 0.6),
        ("spread", "limit-spread", 0.5),
        ("soldout", "healthz", 0.5),
    ):
        num = get(stack, "conflicts_per_s" if stack == "soldout" else "ok_per_s")
        den = get(limit, "rps" if limit == "healthz" else "ok_per_s")
        if num is not None and den:
            out[f"{stack} / {limit}"] = {"ratio": round(num / den, 3), "goal": goal, "met": num / den >= goal}
    return out


def markdown(report):
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


def chart(report):
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
    CHART.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(CHART, dpi=110)
    plt.close(fig)


def update_docs(block):
    text = DOCS.read_text() if DOCS.exists() else f"# Benchmarks\n\n{MARK_START}\n{MARK_END}\n"
    if MARK_START not in text:
        text += f"\n{MARK_START}\n{MARK_END}\n"
    head, _, rest = text.partition(MARK_START)
    _, _, tail = rest.partition(MARK_END)
    DOCS.write_text(f"{head}{MARK_START}\n{block}\n{MARK_END}{tail}")


# --- main --------------------------------------------------------------------------------------------------


def run_suite(url, tokens_file, customer_id, *, args, names, gunicorn_kwargs, tag=""):
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
        try:
            run_wrk(
                server.base,
                "spread",
                duration=3,
                connections=args.connections,
                tokens_file=tokens_file,
                workers=server.worker_pids(),
            )  # warm-up
            for name in stack:
                busy = wait_for_quiet(args.quiet_wait)
                r = run_wrk(
                    server.base,
                    name,
                    duration=args.duration,
                    connections=args.connections,
                    tokens_file=tokens_file,
                    workers=server.worker_pids(),
                )
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


MATRIX = [
    ("sync, 5 workers (gunicorn's usual 2 x cores + 1)", {"workers": 5}),
    ("sync, 2 workers (= cores)", {"workers": 2}),
    ("sync, 3 workers", {"workers": 3}),
    ("sync, 8 workers", {"workers": 8}),
    ("sync, 16 workers", {"workers": 16}),
    ("gthread, 2 workers x 8 threads (keep-alive)", {"workers": 2, "worker_class": "gthread", "threads": 8}),
    ("gthread, 4 workers x 4 threads (keep-alive)", {"workers": 4, "worker_class": "gthread", "threads": 4}),
    ("sync, 5 workers, DB_CONN_MAX_AGE=0", {"workers": 5, "conn_max_age": 0}),
]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.run")
    parser.add_argument("--duration", type=int, default=15, help="seconds per scenario (default 15)")
    parser.add_argument("--connections", type=int, default=100)
    # One sync worker per core: PostgreSQL and the load generator share these cores, and the matrix measured
    # fewer context switches beating gunicorn's usual 2 x cores + 1 (see docs/benchmarks.md).
    parser.add_argument("--workers", type=int, default=int(os.environ.get("WEB_CONCURRENCY", os.cpu_count() or 2)))
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
    args = parser.parse_args(argv)
    RESULTS.mkdir(exist_ok=True)
    ensure_tools(need_pyspy=args.profile)
    url = db_url(args.dbname)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    tokens_file, customer_id = seed(url)

    if args.matrix:
        names = (args.only or "hot,spread,soldout").split(",")
        rows = []
        picked = [MATRIX[int(i)] for i in args.matrix_rows.split(",")] if args.matrix_rows else MATRIX
        for label, kwargs in picked:
            results, desc = run_suite(
                url, tokens_file, customer_id, args=args, names=names, gunicorn_kwargs=kwargs, tag=f"[{label}] "
            )
            rows.append({"config": label, "gunicorn": desc, "results": results})
        (RESULTS / "bench-matrix.json").write_text(json.dumps(rows, indent=2))
        print(
            "\n| config | "
            + " | ".join(f"{n} ok/s (p99 ms) [CPU ms/req]" for n in names)
            + " | other processes CPU % (hot) |"
        )
        print("|---|" + "---:|" * (len(names) + 1))
        for row in rows:
            cells = []
            for n in names:
                r = row["results"][n]
                v = r["conflicts_per_s"] if n == "soldout" else (r["rps"] if n == "healthz" else r["ok_per_s"])
                cells.append(f"{v:.0f} ({r['p99_ms']:.0f}) [{r.get('cpu_ms_per_request')}]")
            hot = row["results"].get("hot", {})
            print(f"| {row['config']} | " + " | ".join(cells) + f" | {hot.get('other_cpu_pct')} |")
        return 0

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
    clean = all(r["audit_clean"] for r in results.values()) and not sum(r["status_5xx"] for r in results.values())
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
