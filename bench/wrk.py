"""The one wrk runner: every HTTP cell is ``run_wrk`` (wrk + bench/checkout.lua against a gunicorn on 127.0.0.1),
sampled while it runs (bench.sampling: the workers' and PostgreSQL's CPU from /proc) and read by ``parse_wrk``.

wrk runs a closed loop: each of its connections sends its next request when the previous answer arrived, so the
latency it reports is the service's (queueing inside gunicorn included), not a backlog in the load generator.
"""

import json
import os
import re
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench.sampling import wait_sampling
from bench.seeding import HOT, QUEUE_PASSES, QUEUED, SOLD_OUT, SPREAD_COUNT, SPREAD_FIRST
from devtools.processes import ROOT

MODES = ("hot", "spread", "multi", "soldout", "healthz", "product", "queue_poll", "queue_poll_unsigned", "queue_join")
# The checkouts: a 409 (sold out, a lost race) is an answer they may give, not an error.
CHECKOUTS = ("hot", "spread", "multi")
# What a cell counts per second: the answer each mode exists to produce (the queue polls: a 200 with a waiting pass).
COUNTED = {  # the checkouts: s201
    "soldout": "s409",
    "healthz": "s2xx",
    "product": "s2xx",
    "queue_poll": "swaiting",
    "queue_poll_unsigned": "swaiting",
}


def wrk_command(base: str, *, duration: int, connections: int) -> list[str]:
    return ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--timeout", "10s", "-s", "bench/checkout.lua", base]


def wrk_env(mode: str, tokens_file: Path, passes_file: Path = QUEUE_PASSES) -> dict[str, str]:
    """The environment bench/checkout.lua reads: the mode, the tokens file, the product ids, the waiting passes."""
    if mode not in MODES:
        raise ValueError(f"unknown wrk mode {mode!r}; choose from {', '.join(MODES)}")
    return dict(
        os.environ,
        BENCH_MODE=mode,
        BENCH_TOKENS=str(tokens_file),
        BENCH_PRODUCT=str({"soldout": SOLD_OUT, "queue_join": QUEUED}.get(mode, HOT)),
        BENCH_SPREAD_FIRST=str(SPREAD_FIRST),
        BENCH_SPREAD_COUNT=str(SPREAD_COUNT),
        BENCH_PASSES=str(passes_file),
    )


def parse_wrk(out: str, mode: str) -> dict[str, Any]:
    """wrk's output (the ``BENCH_JSON`` line bench/checkout.lua prints) as one cell: the counted answers per second,
    all requests per second, p50/p99 in ms, the answers that should not happen (``errors``: 5xx, socket errors,
    for the checkouts any status but 201/409, for the queue polls anything but a 200 with a waiting pass, for the
    queue join anything but a 201)."""
    match = re.search(r"BENCH_JSON (\{.*\})", out)
    if not match:
        raise ValueError(f"no BENCH_JSON line in wrk's output:\n{out}")
    raw = json.loads(match.group(1))
    seconds = raw["duration_us"] / 1e6
    counted = raw[COUNTED.get(mode, "s201")]
    socket_errors = raw["connect_errors"] + raw["read_errors"] + raw["write_errors"] + raw["timeouts"]
    unexpected = raw["requests"] - counted - (raw["s409"] if mode in CHECKOUTS else 0)
    return {
        "requests": raw["requests"],
        "seconds": round(seconds, 2),
        "per_s": round(counted / seconds, 1),
        "rps": round(raw["requests"] / seconds, 1),
        "p50_ms": raw["p50_us"] / 1000,
        "p99_ms": raw["p99_us"] / 1000,
        "status_5xx": raw["s5xx"],
        "errors": max(unexpected, 0) + socket_errors,
    }


def run_wrk(
    base: str,
    mode: str,
    *,
    duration: int,
    connections: int,
    tokens_file: Path,
    workers: Iterable[int] = (),
    passes_file: Path = QUEUE_PASSES,
) -> dict[str, Any]:
    """One wrk run of ``mode`` against ``base``: ``parse_wrk``'s cell plus the CPU read over it (``workers``: the
    gunicorn worker pids), per request: Python (the workers) and PostgreSQL (every server process), in ms. The queue
    polls send the waiting passes of ``passes_file`` (the seed's)."""
    cmd = wrk_command(base, duration=duration, connections=connections)
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=wrk_env(mode, tokens_file, passes_file),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    resources = wait_sampling(proc, workers)
    assert proc.stdout is not None
    out = proc.stdout.read()
    if proc.returncode != 0:
        raise SystemExit(f"wrk failed ({proc.returncode}):\n{out}")
    cell = parse_wrk(out, mode)
    requests = cell["requests"] or 1
    return {
        **cell,
        "python_cpu_ms": round(1000 * resources["worker_cpu_s"] / requests, 3),
        "pg_cpu_ms": round(1000 * resources["postgres_cpu_s"] / requests, 3),
        "loadgen_cpu_pct": resources["loadgen_cpu_pct"],
        "other_cpu_pct": resources["other_cpu_pct"],
    }
