"""``python -m bench crowd`` (``make loadtest-wait``): a waiting line of 50,000 buyers at one queued opening, driven
by the light client bench/crowd.py, once polling with the signed pass (``Queue-Pass``) and once without it (the
poll that reads the pass from the database), side by side.

Each mode runs on a fresh database (skincare_loadtest_wait) with its own gunicorn (3 workers) and a sweeper
advancing the queue every 0.5 s: ``--buyers`` customers (tokens issued in bulk) join product 101's queue at random
moments of the ``--join-spread`` seconds before the opening, poll exactly when ``poll_after`` says, check out once
admitted (``--pace`` per second, ``--stock`` units, one each) and pay; the rest reach ``sold_out``. The window is
bounded: from the first join to ``--until`` seconds after the opening.

Reported per mode: polls the queue asked for (due in the window) against those answered (the ratio: ≥ 1 is the
goal, the server keeping up); the primary's CPU (its PostgreSQL processes from /proc, summed) and its transactions
(``pg_stat_database``: every statement outside a transaction block is one) per second in each phase: idle (the
same stack, sweeper running, before the first join), joining (the minute before the opening), selling (the opening
to the last sale) and sold out (the rest); transactions per poll (the sold-out phase, net of idle: only polls run
then); the web workers' CPU; the client's own latencies, lag and CPU (and whether it saturated); the service's own
latencies (gunicorn's access lines); exactness (paid units == stock, audit_inventory clean, no 5xx, no time-out).
"""

import argparse
import json
import subprocess
import sys
import threading
import time
from typing import Any

import psutil
import psycopg

from bench.loadtest import sale_opens_at, server_latencies
from devtools.processes import (
    PY,
    RESULTS,
    ROOT,
    Gunicorn,
    ctl,
    django_env,
    flash_sale_setup,
    log,
    manage,
    query,
    recreate_database,
    server_url,
)

IDLE_SECONDS, CLIENT_START_SECONDS = 10, 5
XACTS_SQL = "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"
# Units of product 101 paid, and held (paid or still reserved), by orders since the sale's setup.
SOLD_SQL = """
SELECT coalesce(sum(l.qty) FILTER (WHERE o.status = 'paid'), 0), coalesce(sum(l.qty), 0)
  FROM orders o JOIN order_lines l ON l.order_id = o.id
 WHERE l.product_id = 101 AND o.id > {since} AND o.status <> 'cancelled'
"""


def cpu_seconds(proc: psutil.Process) -> float:
    """A process's CPU and that of its children, live or waited for (PostgreSQL's postmaster reaps its backends)."""
    total = 0.0
    with proc.oneshot():
        t = proc.cpu_times()
        total += t.user + t.system + t.children_user + t.children_system
    for child in proc.children():
        try:
            t = child.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            continue
    return total


class Primary:
    """Samples, every second on its own connection, the primary's CPU (its PostgreSQL processes) and its
    transactions; the sampler's own transaction per sample is subtracted."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url.replace("postgres://", "postgresql://", 1), autocommit=True)
        (backend,) = self.conn.execute("SELECT pg_backend_pid()").fetchone()
        self.postmaster = psutil.Process(psutil.Process(backend).ppid())
        self.samples: list[tuple[float, float, float]] = []  # (time, CPU seconds, transactions)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def sample(self) -> None:
        (xacts,) = self.conn.execute(XACTS_SQL).fetchone()
        self.samples.append((time.time(), cpu_seconds(self.postmaster), float(xacts) - len(self.samples)))

    def run(self) -> None:
        while not self.stop.wait(1.0):
            self.sample()

    def between(self, start: float, end: float) -> dict[str, float] | None:
        """CPU cores and transactions per second between the samples nearest ``start`` and ``end``."""
        inside = [s for s in self.samples if start - 0.5 <= s[0] <= end + 0.5]
        if len(inside) < 2 or inside[-1][0] - inside[0][0] < 1:
            return None
        (t0, c0, x0), (t1, c1, x1) = inside[0], inside[-1]
        return {
            "seconds": round(t1 - t0, 1),
            "cpu_cores": round((c1 - c0) / (t1 - t0), 3),
            "xacts_per_s": (x1 - x0) / (t1 - t0),
        }

    def __enter__(self) -> "Primary":
        self.sample()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)
        self.conn.close()


def run_mode(args: argparse.Namespace, *, send_pass: bool) -> dict[str, Any]:
    mode = "signed pass" if send_pass else "database read"
    url = server_url("skincare_loadtest_wait")
    log(f"{mode}: fresh database, {args.buyers} customer tokens")
    recreate_database(url)
    tokens_file = RESULTS / "crowd-tokens.json"
    ctl(url, "tokens", str(args.buyers), "crowd-buyer", str(tokens_file))
    env = {"API_TOKEN_CACHE_SECONDS": args.token_cache} if args.token_cache is not None else {}
    server = Gunicorn(url, workers=args.workers, extra_env=env).start()
    lead = IDLE_SECONDS + CLIENT_START_SECONDS + args.join_spread
    window = ("--duration", "900", "--max-per-customer", "1", "--queue", "--admit-per-second", str(args.pace))
    since = flash_sale_setup(url, args.stock, "--starts-in", str(lead), *window)
    opens_at = sale_opens_at(url)
    sweeper = subprocess.Popen(
        [PY, "manage.py", "expire_reservations", "--loop", "--interval", "0.5", "--verbosity", "0"],
        cwd=ROOT,
        env=django_env(url),
    )
    out = RESULTS / f"crowd-{'pass' if send_pass else 'db'}.json"
    workers = [psutil.Process(pid) for pid in server.worker_pids()]
    try:
        with Primary(url) as primary:
            time.sleep(IDLE_SECONDS)  # the idle baseline: the stack and the sweeper, no buyer yet
            web_before = sum(cpu_seconds(w) for w in workers)
            argv = [PY, "-m", "bench.crowd", "--base", server.base, "--tokens", str(tokens_file)]
            argv += ["--opens-at", repr(opens_at), "--join-spread", str(args.join_spread), "--until", str(args.until)]
            argv += ["--connections", str(args.connections), "--out", str(out)]
            log(f"{mode}: {args.buyers} buyers join over {args.join_spread} s, the sale opens at +{lead:.0f} s")
            client = subprocess.run([*argv, *([] if send_pass else ["--no-pass"])], cwd=ROOT, capture_output=True)
            if client.returncode != 0:
                raise SystemExit(f"the client failed:\n{client.stderr.decode()[-2000:]}")
            web_cpu = sum(cpu_seconds(w) for w in workers) - web_before
    finally:
        sweeper.terminate()
        sweeper.wait(30)
        errors = server.errors_in_log()
        server.stop()
    report = json.loads(out.read_text())
    joins_from, end = opens_at - args.join_spread, opens_at + args.until
    sold_at = report["last_sale_at"] or opens_at
    phases = {
        "idle": primary.between(joins_from - CLIENT_START_SECONDS - IDLE_SECONDS, joins_from - CLIENT_START_SECONDS),
        "joining": primary.between(joins_from, opens_at),
        "selling": primary.between(opens_at, sold_at),
        "sold out": primary.between(sold_at + 1, end),
    }
    idle_xacts = (phases["idle"] or {}).get("xacts_per_s", 0.0)
    polls_after = sum(n for s, n in report["polls_answered_per_second"].items() if opens_at + int(s) > sold_at + 1)
    sold_out_phase = phases["sold out"]
    xacts_per_poll = None
    if sold_out_phase and polls_after:
        net = (sold_out_phase["xacts_per_s"] - idle_xacts) * sold_out_phase["seconds"]
        xacts_per_poll = round(net / polls_after, 3)
    units, held = (int(n) for n in query(url, SOLD_SQL.format(since=int(since)))[0])
    audit = manage(url, "audit_inventory", check=False, quiet=True)
    statuses = report["statuses"]
    violations = [
        *([f"oversold: {held} units held, stock {args.stock}"] if held > args.stock else []),
        *([f"sold {units} of {args.stock}, {report['unfinished']} buyers unfinished"] if units != args.stock else []),
        *(["audit_inventory found violations"] if audit.returncode != 0 else []),
        *[f"{n} x {k}" for k, n in statuses.items() if " 5" in k or "time-out" in k or "no answer" in k],
        *([f"gunicorn logged {len(errors)} errors"] if errors else []),
        *(
            [f"no poll was answered in the window ({report['polls_due']} were due)"]
            if report["polls_due"] and not report["polls_answered"]
            else []
        ),
    ]
    return {
        "mode": mode,
        "client": {k: v for k, v in report.items() if not k.endswith("per_second")},
        "paid_units": units,
        "held_units": held,
        "primary": phases,
        "xacts_per_poll_sold_out_net_of_idle": xacts_per_poll,
        "polls_in_sold_out_phase": polls_after,
        "web_cpu_seconds": round(web_cpu, 1),
        "server_ms": server_latencies(server.log_path, 0),
        "violations": violations,
    }


def side_by_side(results: list[dict[str, Any]]) -> str:
    def row(label: str, cell: Any) -> str:
        return f"{label:<44}" + "".join(f"{cell(r)!s:>22}" for r in results)

    def phase(name: str, key: str) -> Any:
        return lambda r: (
            (r["primary"][name] or {}).get(key)
            if key != "xacts_per_s"
            else round((r["primary"][name] or {}).get(key, 0), 1)
        )

    c = lambda r: r["client"]  # noqa: E731

    def step(r: dict[str, Any], series: str, name: str, quantiles: tuple[str, ...]) -> str:
        """A step's quantiles, or that nothing of it was answered (or sent) in the window."""
        summary = c(r)[series].get(name) or {}
        if all(summary.get(q) is None for q in quantiles):
            return "none answered" if series == "latency_ms" else "none sent"
        return " / ".join(str(summary.get(q)) for q in quantiles)

    lines = [
        row("", lambda r: r["mode"]),
        row("finals", lambda r: " ".join(f"{k} {v}" for k, v in sorted(c(r)["finals"].items()))),
        row("unfinished at the end of the window", lambda r: c(r)["unfinished"]),
        row(
            "requests answered/s: mean (peak)",
            lambda r: f"{c(r)['answered_per_second_mean']} ({c(r)['answered_per_second_peak']})",
        ),
        row("polls due in the window / answered", lambda r: f"{c(r)['polls_due']} / {c(r)['polls_answered']}"),
        row("polls sustained / asked (ratio)", lambda r: c(r)["polls_sustained_ratio"]),
        row("poll p50 / p99 ms (client)", lambda r: step(r, "latency_ms", "poll", ("p50", "p99"))),
        row("poll lag p99 ms (due -> sent)", lambda r: step(r, "lag_ms", "poll", ("p99",))),
        row(
            "poll p99 ms (in the service)",
            lambda r: r["server_ms"].get("poll", r["server_ms"].get("poll (no signed pass)", {})).get("p99_ms"),
        ),
        row("join p99 ms (client)", lambda r: step(r, "latency_ms", "join", ("p99",))),
        row("checkout p99 ms (client)", lambda r: step(r, "latency_ms", "checkout", ("p99",))),
        *[row(f"primary CPU cores: {p}", phase(p, "cpu_cores")) for p in ("idle", "joining", "selling", "sold out")],
        *[
            row(f"primary transactions/s: {p}", phase(p, "xacts_per_s"))
            for p in ("idle", "joining", "selling", "sold out")
        ],
        row("transactions per poll (sold out, net of idle)", lambda r: r["xacts_per_poll_sold_out_net_of_idle"]),
        row("web workers' CPU seconds", lambda r: r["web_cpu_seconds"]),
        row(
            "client CPU s (ms per request)",
            lambda r: f"{c(r)['client_cpu_seconds']} ({c(r)['client_cpu_ms_per_request']})",
        ),
        row("client peak memory MB", lambda r: c(r)["client_max_rss_mb"]),
        row("client loop lag p99 ms; saturated", lambda r: f"{c(r)['loop_lag_p99_ms']}; {c(r)['client_saturated']}"),
        row("units paid / held (stock)", lambda r: f"{r['paid_units']} / {r['held_units']}"),
        row("exact: sold out, audit clean, no 5xx/time-out", lambda r: "yes" if not r["violations"] else "NO"),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench crowd", description=__doc__.split("\n\n")[0])
    parser.add_argument("--buyers", type=int, default=50_000, help="waiting buyers (50,000)")
    parser.add_argument("--stock", type=int, default=500, help="units (500)")
    parser.add_argument("--pace", type=int, default=50, help="admissions per second (50)")
    parser.add_argument("--join-spread", type=int, default=60, help="joins over this many seconds before the opening")
    parser.add_argument("--until", type=int, default=90, help="the window ends this many seconds after the opening")
    parser.add_argument("--connections", type=int, default=64, help="the client's connection pool (64)")
    parser.add_argument("--workers", type=int, default=3, help="gunicorn workers (3)")
    parser.add_argument("--token-cache", type=int, help="the server's API_TOKEN_CACHE_SECONDS (its default)")
    parser.add_argument("--mode", choices=("both", "pass", "db"), default="both", help="signed pass, database, both")
    args = parser.parse_args(argv)
    RESULTS.mkdir(exist_ok=True)
    modes = {"both": (True, False), "pass": (True,), "db": (False,)}[args.mode]
    results = [run_mode(args, send_pass=send_pass) for send_pass in modes]
    (RESULTS / "crowd.json").write_text(json.dumps(results, indent=2))
    print(
        f"\n=== {args.buyers} waiting, {args.stock} units at {args.pace}/s, joins over {args.join_spread} s, window "
        f"to +{args.until} s after the opening ==="
    )
    print(side_by_side(results))
    for r in results:
        print(f"{r['mode']}: " + ("exact" if not r["violations"] else "FAILED: " + "; ".join(r["violations"])))
        if r["client"]["client_saturated"]:
            print(f"{r['mode']}: the client saturated: its latencies include its own queueing")
    log(f"details: {(RESULTS / 'crowd.json').relative_to(ROOT)}")
    return 1 if any(r["violations"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
