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
import bisect
import json
import subprocess
import sys
import threading
import time
from typing import Any, NamedTuple

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
# A pass must be in the database within QUEUE_JOIN_FLUSH_MS of its answer, plus this for the flush's own statement
# and a worker's thread waiting for the CPU.
RECORD_SLACK_MS = 300
# The primary's transactions, the passes it holds, and the scans of the API tokens (a bearer token a web worker does
# not remember yet is looked up), in one transaction per sample.
SAMPLE_SQL = """
SELECT (SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()),
       (SELECT count(*) FROM queue_passes),
       (SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables WHERE relname = 'api_tokens')
"""
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


class Sample(NamedTuple):
    at: float  # before the statement: a pass answered before then and counted is in ``passes``
    cpu: float  # the primary's CPU seconds so far
    xacts: float  # its transactions so far, the sampler's own subtracted
    passes: int  # the passes it holds
    token_lookups: int  # the scans of api_tokens so far


class Primary:
    """Samples, every second on its own connection, the primary's CPU (its PostgreSQL processes), its transactions
    (the sampler's own transaction per sample subtracted), the passes written and the token lookups."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url.replace("postgres://", "postgresql://", 1), autocommit=True)
        (backend,) = self.conn.execute("SELECT pg_backend_pid()").fetchone()
        self.postmaster = psutil.Process(psutil.Process(backend).ppid())
        self.samples: list[Sample] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def sample(self) -> None:
        at = time.time()
        xacts, passes, lookups = self.conn.execute(SAMPLE_SQL).fetchone()
        cpu = cpu_seconds(self.postmaster)
        self.samples.append(Sample(at, cpu, float(xacts) - len(self.samples), int(passes), int(lookups or 0)))

    def run(self) -> None:
        while not self.stop.wait(1.0):
            self.sample()

    def between(self, start: float, end: float) -> dict[str, float] | None:
        """CPU cores, transactions and token lookups per second between the samples nearest ``start`` and ``end``."""
        inside = [s for s in self.samples if start - 0.5 <= s.at <= end + 0.5]
        if len(inside) < 2 or inside[-1].at - inside[0].at < 1:
            return None
        first, last = inside[0], inside[-1]
        seconds = last.at - first.at
        return {
            "from": first.at,
            "to": last.at,
            "seconds": round(seconds, 1),
            "cpu_cores": round((last.cpu - first.cpu) / seconds, 3),
            "xacts_per_s": (last.xacts - first.xacts) / seconds,
            "token_lookups_per_s": (last.token_lookups - first.token_lookups) / seconds,
        }

    def __enter__(self) -> "Primary":
        self.sample()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)
        self.conn.close()


def failed(statuses: dict[str, int]) -> dict[str, int]:
    """The client's statuses that are failures: a 5xx, a time-out, a connection that gave no answer."""
    return {k: n for k, n in statuses.items() if " 5" in k or "time-out" in k or "no answer" in k}


def joined_ms(client: dict[str, Any], quantiles: tuple[str, ...]) -> str:
    """The join answer's quantiles, or that no join was answered."""
    summary = client["join_answer_ms"]
    if all(summary.get(q) is None for q in quantiles):
        return "none answered"
    return " / ".join(str(summary.get(q)) for q in quantiles)


def unrecorded(samples: list[Sample], answered_at: list[float]) -> dict[str, float | int]:
    """What the samples prove about passes answered but not in the database yet. A sample taken at ``t`` that counts
    R passes while N passes had been answered before ``t`` proves at least N - R unwritten, and the oldest of them
    answered no later than the (R+1)-th answer, so at least ``t`` minus that answer old. Returns the most unwritten
    at a sample and the oldest age (ms) any sample proves; both are lower bounds, sampled once a second."""
    answered = sorted(answered_at)
    most, oldest = 0, 0.0
    for sample in samples:
        before = bisect.bisect_left(answered, sample.at)
        if before > sample.passes:
            most = max(most, before - sample.passes)
            oldest = max(oldest, sample.at - answered[sample.passes])
    return {"most": most, "oldest_ms": round(oldest * 1000, 1)}


def per_join(phase: dict[str, float] | None, idle: dict[str, float] | None, answered_at: list[float]) -> dict | None:
    """The primary's cost of the joins answered in ``phase``, net of ``idle``: its transactions, its token lookups
    (a customer a web worker meets for the first time), the transactions besides those lookups, and its CPU (ms)."""
    if not phase:
        return None
    joins = sum(1 for at in answered_at if phase["from"] <= at <= phase["to"])
    if not joins:
        return None
    base = idle or {"xacts_per_s": 0.0, "cpu_cores": 0.0, "token_lookups_per_s": 0.0}
    span = phase["seconds"]
    xacts = (phase["xacts_per_s"] - base["xacts_per_s"]) * span / joins
    lookups = (phase["token_lookups_per_s"] - base["token_lookups_per_s"]) * span / joins
    return {
        "joins": joins,
        "xacts": round(xacts, 3),
        "token_lookups": round(lookups, 3),
        "xacts_besides_lookups": round(xacts - lookups, 3),
        "cpu_ms": round((phase["cpu_cores"] - base["cpu_cores"]) * span * 1000 / joins, 3),
    }


def run_mode(args: argparse.Namespace, *, send_pass: bool) -> dict[str, Any]:
    mode = "signed pass" if send_pass else "database read"
    url = server_url("skincare_loadtest_wait")
    log(f"{mode}: fresh database, {args.buyers} customer tokens")
    recreate_database(url)
    tokens_file = RESULTS / "crowd-tokens.json"
    ctl(url, "tokens", str(args.buyers), "crowd-buyer", str(tokens_file))
    env = {"QUEUE_JOIN_FLUSH_MS": str(args.join_flush_ms)}
    if args.token_cache is not None:
        env["API_TOKEN_CACHE_SECONDS"] = str(args.token_cache)
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
    joins_answered = report["joins_answered_at"]
    (recorded,) = (int(n) for n in query(url, "SELECT count(*) FROM queue_passes")[0])
    backlog = unrecorded(primary.samples, joins_answered)
    bound_ms = args.join_flush_ms + RECORD_SLACK_MS
    audit = manage(url, "audit_inventory", check=False, quiet=True)
    statuses = report["statuses"]
    violations = [
        *([f"oversold: {held} units held, stock {args.stock}"] if held > args.stock else []),
        *([f"sold {units} of {args.stock}, {report['unfinished']} buyers unfinished"] if units != args.stock else []),
        *(["audit_inventory found violations"] if audit.returncode != 0 else []),
        *(
            [f"{len(joins_answered)} joins answered, {recorded} passes in the database"]
            if recorded != len(joins_answered)
            else []
        ),
        *(
            [f"a pass answered {backlog['oldest_ms']} ms before a sample was not in the database (bound {bound_ms} ms)"]
            if backlog["oldest_ms"] > bound_ms
            else []
        ),
        *[f"{n} x {k}" for k, n in failed(statuses).items()],
        *([f"gunicorn logged {len(errors)} errors"] if errors else []),
        *(
            [f"no poll was answered in the window ({report['polls_due']} were due)"]
            if report["polls_due"] and not report["polls_answered"]
            else []
        ),
    ]
    return {
        "mode": mode,
        "client": {k: v for k, v in report.items() if not k.endswith("per_second") and k != "joins_answered_at"},
        "passes_recorded": recorded,
        "unrecorded": backlog,
        "record_bound_ms": bound_ms,
        "per_join": per_join(phases["joining"], phases["idle"], joins_answered),
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
        return f"{label:<48}" + "".join(f"{cell(r)!s:>22}" for r in results)

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
        row("joins answered / passes in the database", lambda r: f"{c(r)['joins_answered']} / {r['passes_recorded']}"),
        row("joins answered/s: mean (peak)", lambda r: f"{c(r)['join_rate_mean']} ({c(r)['join_rate_peak']})"),
        row("join answer p50 / p99 ms (arrival -> pass)", lambda r: joined_ms(c(r), ("p50", "p99"))),
        row(
            "unwritten passes at a sample: most; oldest ms",
            lambda r: f"{r['unrecorded']['most']}; {r['unrecorded']['oldest_ms']} (<= {r['record_bound_ms']})",
        ),
        row("primary transactions per join (net of idle)", lambda r: (r["per_join"] or {}).get("xacts")),
        row("  of which token lookups", lambda r: (r["per_join"] or {}).get("token_lookups")),
        row("primary CPU ms per join (net of idle)", lambda r: (r["per_join"] or {}).get("cpu_ms")),
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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench crowd", description=__doc__.split("\n\n")[0])
    parser.add_argument("--buyers", type=int, default=50_000, help="waiting buyers (50,000)")
    parser.add_argument("--stock", type=int, default=500, help="units (500)")
    parser.add_argument("--pace", type=int, default=50, help="admissions per second (50)")
    parser.add_argument("--join-spread", type=int, default=60, help="joins over this many seconds before the opening")
    parser.add_argument("--until", type=int, default=90, help="the window ends this many seconds after the opening")
    parser.add_argument("--connections", type=int, default=64, help="the client's connection pool (64)")
    parser.add_argument("--workers", type=int, default=3, help="gunicorn workers (3)")
    parser.add_argument("--join-flush-ms", type=int, default=200, help="the server's QUEUE_JOIN_FLUSH_MS (200)")
    parser.add_argument("--token-cache", type=int, help="the server's API_TOKEN_CACHE_SECONDS (its default)")
    parser.add_argument("--mode", choices=("both", "pass", "db"), default="both", help="signed pass, database, both")
    return parser.parse_args(argv)


def first_minute(r: dict[str, Any], args: argparse.Namespace) -> str:
    """The crowd's first minute as make bench's second table: one signed-pass run of ``run_mode``."""
    c, cost = r["client"], r["per_join"] or {}
    joining, idle = r["primary"]["joining"] or {}, r["primary"]["idle"] or {}
    rows = [
        ("joins answered / passes in the database", f"{c['joins_answered']:,} / {r['passes_recorded']:,}"),
        ("joins answered per second: mean (peak second)", f"{c['join_rate_mean']} ({c['join_rate_peak']})"),
        ("join answer p50 / p99 / max ms (arrival to pass, at the client)", joined_ms(c, ("p50", "p99", "max"))),
        (
            "unwritten passes at a once-a-second sample: most; oldest ms (bound)",
            f"{r['unrecorded']['most']}; {r['unrecorded']['oldest_ms']} ({r['record_bound_ms']})",
        ),
        ("primary transactions per join, net of idle", cost.get("xacts")),
        ("  of which API token lookups (a customer new to a worker)", cost.get("token_lookups")),
        ("primary CPU ms per join, net of idle", cost.get("cpu_ms")),
        ("primary CPU cores: idle / joining", f"{idle.get('cpu_cores')} / {joining.get('cpu_cores')}"),
        ("polls sustained / asked", c["polls_sustained_ratio"]),
        ("poll lag p99 ms (due to sent)", (c["lag_ms"].get("poll") or {}).get("p99")),
        ("5xx, time-outs, no answer", sum(failed(c["statuses"]).values())),
        ("client saturated", c["client_saturated"]),
        ("units paid (stock); exact", f"{r['paid_units']} ({args.stock}); {'yes' if not r['violations'] else 'NO'}"),
    ]
    return "\n".join(
        [
            f"The crowd's first minute (`python -m bench crowd --mode pass`): {c['buyers']:,} buyers join product 101's "
            f"queue over the {args.join_spread} s before its opening and wait, {args.stock} units at {args.pace} "
            f"admissions/s, gunicorn with {args.workers} workers as `make run` serves them, joins written every "
            f"{args.join_flush_ms} ms.",
            "",
            "| figure | value |",
            "|---|---:|",
            *[f"| {label} | {value} |" for label, value in rows],
        ]
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
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
