"""The cells of the one results table: what each row measures, on which server or in pgbench, and the row of the
same run it is compared with (its baseline). ``run_rounds`` runs them in rounds, every other round in reverse order,
``manage.py audit_inventory`` after each round.

HTTP cells: wrk (bench.wrk) against gunicorn with ``make run``'s configuration (the service), against the framework
floor (bench.floor: the same gunicorn serving a minimal Django view that runs the seed's transaction with one
cursor), and against the service with one measured decision undone (``VARIANTS``). pgbench cells: the seed's
transaction and the service's statements (bench.scripts) through bench.pgbench.
"""

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import floor
from bench.pgbench import prepare, run_pgbench
from bench.scripts import seed_script, service_script
from bench.seeding import JOIN_TOKENS, set_hot_buckets
from bench.wrk import run_wrk
from devtools.processes import PY, ROOT, Gunicorn, django_env, log

WORKERS = (os.cpu_count() or 2) + 1  # make run's default: cores + 1 workers (of WEB_THREADS threads each)


@dataclass(frozen=True)
class Cell:
    row: str  # the table row's label
    baseline: str | None  # the row it is compared with, None for a reference
    server: str = ""  # HTTP: the SERVERS key; pgbench cells have none
    mode: str = ""  # HTTP: bench/checkout.lua's mode
    script: dict[str, Any] = field(default_factory=dict)  # pgbench: service_script's options, or {"seed": True}
    clients: int = 0  # pgbench: 0 = the run's connections
    query_mode: str = "prepared"


HEALTHZ, PRODUCT, SOLD_OUT = "HTTP GET /healthz", "HTTP product GET", "HTTP sold-out checkout (409)"
POLL, POLL_UNSIGNED = "HTTP queue poll, signed pass", "HTTP queue poll, no signed pass"
JOIN = "HTTP queue join (a new pass, 201), each a customer new to the workers"
HOT, SPREAD = "HTTP checkout, hot product", "HTTP checkout, spread over 1,000 products"
FLOOR_HOT, FLOOR_SPREAD = "HTTP framework floor, hot", "HTTP framework floor, spread"
SEED_HOT, SEED_SPREAD = "pgbench, the seed's transaction, hot", "pgbench, the seed's transaction, spread"
SERVICE_HOT, SERVICE_SPREAD = "pgbench, the service's statements, hot", "pgbench, the service's statements, spread"
ROW_64 = "pgbench, the service's statements, hot, 64 clients"

# The service with one measured decision undone: (extra environment, gunicorn arguments).
VARIANTS: dict[str, dict[str, Any]] = {
    "service": {},
    "floor": {"app": floor.WSGI_APP, "extra_env": {"DJANGO_SETTINGS_MODULE": floor.SETTINGS_MODULE}},
    "connection per request": {"conn_max_age": 0},
    "health checks": {"extra_env": {"DJANGO_SETTINGS_MODULE": "bench.health_checks_settings"}},
    "no sold-out memory": {"extra_env": {"SOLD_OUT_CACHE_MS": "0"}},
    "sync": {"worker_class": "sync", "threads": 1},
    # Production's choice, with a limit no run reaches: the sold-out refusal as production serves it.
    "rate limit on": {"extra_env": {"CHECKOUT_RATE_LIMIT": "100000000/minute"}},
}

CELLS = [
    Cell(HEALTHZ, None, "service", "healthz"),
    Cell(PRODUCT, HEALTHZ, "service", "product"),
    Cell(SOLD_OUT, HEALTHZ, "service", "soldout"),
    Cell(POLL, HEALTHZ, "service", "queue_poll"),  # a waiting pass's poll, answered from the signed pass
    Cell(POLL_UNSIGNED, HEALTHZ, "service", "queue_poll_unsigned"),  # the same poll read from the database
    Cell(JOIN, HEALTHZ, "service", "queue_join"),  # each a customer's first join in the round (bench.seeding)
    Cell(HOT, FLOOR_HOT, "service", "hot"),
    Cell(SPREAD, FLOOR_SPREAD, "service", "spread"),
    Cell(FLOOR_HOT, SEED_HOT, "floor", "hot"),
    Cell(FLOOR_SPREAD, SEED_SPREAD, "floor", "spread"),
    Cell("HTTP checkout, hot, a new connection per request", HOT, "connection per request", "hot"),
    Cell("HTTP sold-out checkout, Django's health checks on", SOLD_OUT, "health checks", "soldout"),
    Cell("HTTP sold-out checkout, no sold-out memory", SOLD_OUT, "no sold-out memory", "soldout"),
    Cell("HTTP sold-out checkout (409), rate limit on", HEALTHZ, "rate limit on", "soldout"),
    Cell("HTTP checkout, hot, sync workers (one request at a time each)", HOT, "sync", "hot"),
    Cell(SEED_HOT, None, script={"seed": True}),
    Cell(SEED_SPREAD, None, script={"seed": True, "spread": True}),
    Cell(SERVICE_HOT, SEED_HOT),
    Cell(SERVICE_SPREAD, SEED_SPREAD, script={"spread": True}),
    Cell("pgbench, the service's statements, hot, -M simple", SERVICE_HOT, query_mode="simple"),
    Cell("pgbench, the service's statements, hot, no generic plans", SERVICE_HOT, script={"generic_plans": False}),
    Cell(ROW_64, None, clients=64),
    Cell(
        "pgbench, the service's statements, hot in 16 buckets, 64 clients", ROW_64, script={"buckets": 16}, clients=64
    ),
]


@dataclass
class Context:
    url: str
    tokens_file: Path
    customer_id: int
    sent: dict[str, Any]  # bench.scripts.service_statements() of this database
    duration: int
    connections: int


def _script(ctx: Context, cell: Cell) -> str:
    options = dict(cell.script)
    if options.pop("seed", False):
        return seed_script(ctx.customer_id, **options)
    return service_script(ctx.sent, ctx.customer_id, **options)


def _http_group(ctx: Context, server_name: str, cells: list[Cell], record: Callable[[Cell, dict], None]) -> None:
    kwargs = {"workers": WORKERS, **VARIANTS[server_name]}
    if server_name == "floor":
        kwargs["extra_env"] = {**kwargs["extra_env"], "BENCH_FLOOR_CUSTOMER": ctx.customer_id}
    server = Gunicorn(ctx.url, **kwargs)
    server.start()
    try:
        run_wrk(server.base, "spread" if server_name != "floor" else "hot", duration=2,
                connections=ctx.connections, tokens_file=ctx.tokens_file)  # fmt: skip  # warm-up
        for cell in cells:
            tokens = JOIN_TOKENS if cell.mode == "queue_join" else ctx.tokens_file
            record(cell, run_wrk(server.base, cell.mode, duration=ctx.duration, connections=ctx.connections,
                                 tokens_file=tokens, workers=server.worker_pids()))  # fmt: skip
    finally:
        errors = server.errors_in_log()
        server.stop()
        if errors:
            log(f"gunicorn ({server_name}) logged {len(errors)} error lines, e.g. {errors[0]}")


def _pgbench_cell(ctx: Context, cell: Cell) -> dict[str, Any]:
    buckets = int(cell.script.get("buckets", 1))
    if buckets > 1:
        set_hot_buckets(ctx.url, buckets)
    try:
        name = cell.row.split(", ", 1)[1].replace(" ", "-").replace(",", "").replace("'", "")
        return run_pgbench(ctx.url, name, _script(ctx, cell), duration=ctx.duration,
                           clients=cell.clients or ctx.connections, query_mode=cell.query_mode)  # fmt: skip
    finally:
        if buckets > 1:
            set_hot_buckets(ctx.url, 1)


def audit(url: str) -> bool:
    """``manage.py audit_inventory`` on the grown tables: statistics refreshed first (a fresh database holds hundreds of
    thousands of orders by now) and a long statement timeout (it reads every row); its output printed when it fails."""
    import psycopg

    with psycopg.connect(url.replace("postgres://", "postgresql://", 1), autocommit=True) as conn:
        conn.execute("ANALYZE")
    proc = subprocess.run([PY, "manage.py", "audit_inventory"], cwd=ROOT, capture_output=True, text=True,
                          env=django_env(url, DB_STATEMENT_TIMEOUT_MS=600_000))  # fmt: skip
    if proc.returncode != 0:
        print(proc.stdout[-3000:] + proc.stderr[-3000:], flush=True)
    return proc.returncode == 0


def only(cells: list[Cell], texts: list[str]) -> list[Cell]:
    """The cells whose row contains one of ``texts``, and their baselines, in order (``python -m bench ... --only``)."""
    chosen = {c.row for c in cells if any(text in c.row for text in texts)}
    chosen |= {c.baseline for c in cells if c.row in chosen and c.baseline}
    return [c for c in cells if c.row in chosen]


def groups(cells: list[Cell]) -> list[tuple[str, list[Cell]]]:
    """The cells by what they run on, in order: one group per HTTP server, then one per pgbench cell."""
    out: list[tuple[str, list[Cell]]] = []
    for cell in cells:
        key = cell.server or f"pgbench:{cell.row}"
        if out and out[-1][0] == key:
            out[-1][1].append(cell)
        else:
            out.append((key, [cell]))
    return out


def run_rounds(ctx: Context, cells: list[Cell], rounds: int) -> list[dict[str, Any]]:
    """Every cell once per round (the groups in reverse order every other round); one dict per cell and round,
    with ``audit_clean`` of the round."""
    prepare(ctx.url)
    results: list[dict[str, Any]] = []
    for r in range(rounds):
        done: list[dict[str, Any]] = []

        def record(cell: Cell, result: dict[str, Any], r: int = r, done: list = done) -> None:
            done.append({"row": cell.row, "round": r + 1, **result})
            log(f"  round {r + 1} {cell.row}: {result['per_s']}/s, p99 {result['p99_ms']} ms, "
                f"Python {result['python_cpu_ms']} ms, PostgreSQL {result['pg_cpu_ms']} ms, errors {result['errors']}")  # fmt: skip

        order = groups(cells)
        for key, members in order if r % 2 == 0 else order[::-1]:
            if key.startswith("pgbench:"):
                record(members[0], _pgbench_cell(ctx, members[0]))
            else:
                _http_group(ctx, key, members, record)
        clean = audit(ctx.url)
        log(f"round {r + 1}: audit_inventory {'clean' if clean else 'FAILED (above)'}")
        results += [{**c, "audit_clean": clean} for c in done]
    return results
