"""Python CPU per request, measured in-process: stable enough to compare changes on a noisy 2-core machine.

    .venv/bin/python -m bench.cpu                                   # all scenarios, 7 rounds x 300 requests
    .venv/bin/python -m bench.cpu --rounds 3 --requests 100         # a quick check
    .venv/bin/python -m bench.cpu --scenarios healthz,checkout --json bench-results/cpu.json --markdown
    .venv/bin/python -m bench.cpu --layers --requests 300          # cProfile: ms per request by layer

Throughput through gunicorn moves by +-20 % between runs here (two shared cores, PostgreSQL and the load
generator on the same box); CPU per request moves much less (see /work/shared/notes/measuring-cpu.md).

Method:

- Django is set up in this process against the real PostgreSQL (``DATABASE_URL``, else the embedded server,
  started with ``python -m devtools.devdb ensure`` like ``make db`` does). Migrations are applied. No mocks.
- Requests are made by calling ``django.core.handlers.wsgi.WSGIHandler()`` directly with a prepared WSGI
  environ (body in ``wsgi.input``), so each one walks the real stack: request_started/request_finished signals
  (connection reuse and health check), every middleware, URL resolution, DRF parsing, Bearer-token
  authentication, the view, the services, JSON rendering. ``django.test.Client`` is not used: it connects and
  disconnects signal receivers (template rendering, ``close_old_connections``) around every request, CPU
  that a real worker does not spend. Every response's status code is checked; a wrong one aborts the run.
- Each scenario is warmed up (default 50 requests), then timed in R rounds (default 7) of N requests (default
  300) with ``time.process_time()``: the CPU of this process only (user + system, all its threads). The
  PostgreSQL backend's CPU is in another process and is NOT counted; neither is time spent waiting for it
  (that shows in the wall time, reported as well). ``gc.collect()`` runs before every round (untimed), so a
  round does not pay for garbage left by the previous one; collections during a round are counted.
- Rounds of different scenarios are interleaved (round r runs every scenario once, the order rotated by r), so
  a burst of noise from other processes spreads over all scenarios instead of one. Reported: the median of the
  per-round means (ms of CPU per request), the min and max round, the median wall time per request.
- The checkout scenario's orders are cancelled after every round (untimed) through
  ``orders.services.order_cancel``, so reservations do not pile up and every stock change is in the ledger;
  at the end ``orders.audit.audit_inventory()`` must report no new violation.

Data: the benchmark uses its own rows in the dev database, created once and reused: customer
``cpu-bench-customer`` (with a DRF token), products ``cpu-bench-stock`` (10,000,000 units) and
``cpu-bench-sold-out`` (0 units), all through the services (``inventory.catalogue.product_create``). Demo data
is not touched. The cancelled bench orders stay in the database (as cancelled orders with their ledger rows).

Environment it runs with: ``DJANGO_SETTINGS_MODULE=skincare.settings``; ``DB_CONN_MAX_AGE=600`` unless set
(one connection reused for the whole run, as a gunicorn worker does with the default 60 s);
``DB_CONN_HEALTH_CHECKS`` left at the settings default (off, as `make bench` measured best; when on, every
request that uses the database starts with a ``SELECT 1`` round trip); ``DJANGO_DEBUG`` off (the default; a
warning is printed otherwise, since DEBUG records every query). The values used are printed and written to the
JSON. docs/benchmarks.md has the numbers, before and after this project's performance work.

For other benchmark code: ``measure()`` runs the HTTP scenarios, ``measure_callable()`` /
``measure_callables()`` time arbitrary zero-argument callables the same way (e.g. two validation
implementations, interleaved), ``markdown_table()`` formats either result.
"""

import argparse
import gc
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

SCENARIOS = ("healthz", "product_get", "checkout_sold_out", "checkout", "queue_poll")
PREFIX = "cpu-bench-"
CUSTOMER = f"{PREFIX}customer"
SKU_STOCK = f"{PREFIX}stock"
SKU_SOLD_OUT = f"{PREFIX}sold-out"
SKU_QUEUED = f"{PREFIX}queued"
BIG_STOCK = 10_000_000

Stats = dict[str, Any]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- timing (no Django needed) ------------------------------------------------------------------------------


def _stats(cpu_ms: list[float], wall_ms: list[float], n: int, pg_ms: list[float] | None = None) -> Stats:
    extra = {"pg_median_ms": statistics.median(pg_ms), "pg_samples_ms": [round(v, 5) for v in pg_ms]} if pg_ms else {}
    return {
        **extra,
        "median_ms": statistics.median(cpu_ms),
        "min_ms": min(cpu_ms),
        "max_ms": max(cpu_ms),
        "wall_median_ms": statistics.median(wall_ms),
        "n": n,
        "rounds": len(cpu_ms),
        "samples_ms": [round(v, 5) for v in cpu_ms],
    }


def measure_callables(
    callables: Mapping[str, Callable[[], object]],
    *,
    rounds: int = 7,
    requests: int = 300,
    warmup: int = 50,
    after_round: Mapping[str, Callable[[], object]] | None = None,
    progress: bool = False,
    server_cpu: Callable[[], float | None] | None = None,
) -> dict[str, Stats]:
    """Time each zero-argument callable: ``warmup`` untimed calls, then ``rounds`` rounds of ``requests`` calls
    timed with ``time.process_time()``; rounds of the callables interleaved, their order rotated every round.

    ``after_round[name]`` (optional) runs untimed after each of that callable's rounds and after its warm-up
    (clean-up). Returns ``{name: {median_ms, min_ms, max_ms, wall_median_ms, n, rounds, samples_ms}}``, where
    every figure is milliseconds per call and ``samples_ms`` are the per-round CPU means. ``server_cpu`` (optional)
    returns the CPU seconds of the PostgreSQL backend serving this process; its growth over each round gives
    ``pg_median_ms`` and ``pg_samples_ms`` per call. The loop itself costs
    some tens of nanoseconds per call; for callables that cheap, raise ``requests`` and compare ratios.
    """
    if rounds < 1 or requests < 1 or warmup < 0:
        raise ValueError("rounds and requests must be >= 1, warmup >= 0")
    names = list(callables)
    after_round = after_round or {}
    for name in names:
        fn = callables[name]
        for _ in range(warmup):
            fn()
        if name in after_round:
            after_round[name]()
    cpu: dict[str, list[float]] = {name: [] for name in names}
    wall: dict[str, list[float]] = {name: [] for name in names}
    server: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            fn = callables[name]
            loop = range(requests)
            gc.collect()
            server_start = server_cpu() if server_cpu else None
            wall_start = time.perf_counter()
            cpu_start = time.process_time()
            for _ in loop:
                fn()
            cpu_end = time.process_time()
            wall_end = time.perf_counter()
            server_end = server_cpu() if server_cpu else None
            if server_start is not None and server_end is not None:
                server[name].append((server_end - server_start) * 1000 / requests)
            cpu[name].append((cpu_end - cpu_start) * 1000 / requests)
            wall[name].append((wall_end - wall_start) * 1000 / requests)
            if name in after_round:
                after_round[name]()
        if progress:
            done = ", ".join(f"{name} {_ms(cpu[name][-1])}" for name in names)
            log(f"round {r + 1}/{rounds}: CPU ms per request: {done}")
    return {name: _stats(cpu[name], wall[name], requests, server[name]) for name in names}


def measure_callable(
    name: str, fn: Callable[[], object], *, rounds: int = 7, requests: int = 300, warmup: int = 50
) -> Stats:
    """Time one zero-argument callable like a scenario (see ``measure_callables``); returns its stats."""
    return measure_callables({name: fn}, rounds=rounds, requests=requests, warmup=warmup)[name]


# --- Django, data, requests ---------------------------------------------------------------------------------


def setup_django() -> None:
    """Configure and set up Django against the real database (embedded server started if needed). Idempotent."""
    from django.apps import apps

    if apps.ready:
        return
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "skincare.settings")
    os.environ.setdefault("DB_CONN_MAX_AGE", "600")
    from skincare import demo

    os.environ.setdefault("DJANGO_SECRET_KEY", demo.BENCH_SECRET_KEY)
    os.environ.setdefault("PAYMENT_WEBHOOK_SECRET", demo.BENCH_WEBHOOK_SECRET)
    os.environ["DJANGO_ENV"] = "development"  # the bench values, which production refuses
    os.environ.setdefault("DJANGO_READ_DOT_ENV_FILE", "false")  # measured as configured here, not by .env
    os.environ.setdefault("MAX_PENDING_ORDERS_PER_CUSTOMER", "0")  # bench only: one customer checks out many times
    if not os.environ.get("DATABASE_URL"):
        proc = subprocess.run(
            [sys.executable, "-m", "devtools.devdb", "ensure"], cwd=ROOT, capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise SystemExit(f"python -m devtools.devdb ensure failed:\n{proc.stdout}{proc.stderr}")
    # WhiteNoise warns when collectstatic has not been run; irrelevant here.
    warnings.filterwarnings("ignore", message="No directory at")
    import django

    django.setup()


@dataclass
class Fixture:
    customer: Any
    token: str
    product_id: int
    sold_out_id: int
    queued_id: int


def _product(sku: str, name: str, stock: int) -> int:
    from inventory import catalogue
    from inventory.models import Product

    product = Product.objects.filter(sku=sku).first()
    if product is None:
        product = catalogue.product_create(sku=sku, name=name, price=Decimal("100000.00"), initial_stock=stock)
        log(f"created product {product.pk} ({sku}, stock {stock})")
    return product.pk


def prepare() -> Fixture:
    """Migrate, then get or create the bench customer, its token and the two bench products; cancel bench orders
    left pending by an interrupted run; check the stock the scenarios need."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from inventory import services
    from inventory.models import Inventory, StockMovement
    from skincare import services as skincare_services

    call_command("migrate", verbosity=0, interactive=False)
    customer, created = get_user_model().objects.get_or_create(username=CUSTOMER)
    if created:
        customer.set_unusable_password()
        customer.save(update_fields=["password"])
    token = skincare_services.api_token_issue(user=customer)  # a fresh one: only digests are stored
    fixture = Fixture(
        customer=customer,
        token=token,
        product_id=_product(SKU_STOCK, "CPU bench product (huge stock, bench only)", BIG_STOCK),
        sold_out_id=_product(SKU_SOLD_OUT, "CPU bench product (sold out, bench only)", 0),
        queued_id=_product(SKU_QUEUED, "CPU bench product (sold through a paused queue, bench only)", 10),
    )
    _waiting_pass(fixture)
    left = cancel_pending(fixture)
    if left:
        log(f"cancelled {left} bench orders left pending by an earlier run")
    sold_out = Inventory.objects.get(product_id=fixture.sold_out_id)
    if sold_out.available_stock != 0:
        raise SystemExit(f"{SKU_SOLD_OUT} (product {fixture.sold_out_id}) has stock {sold_out.available_stock}, not 0")
    stock = Inventory.objects.get(product_id=fixture.product_id).available_stock
    if stock < BIG_STOCK // 2:
        services.stock_adjust(
            product_id=fixture.product_id,
            delta=BIG_STOCK - stock,
            note="cpu bench top-up",
            reason=StockMovement.Reason.RESTOCK,
        )
        log(f"{SKU_STOCK}: stock topped up from {stock} to {BIG_STOCK}")
    return fixture


def _waiting_pass(fixture: Fixture) -> None:
    """The queue_poll scenario's pass: the bench customer waits, placed, in a paused queue (docs/queue.md), so every
    poll answers the same waiting pass."""
    from waitingroom import services as waitingroom_services

    waitingroom_services.queue_set(product_id=fixture.queued_id, admit_per_second=1)
    waitingroom_services.queue_pause(product_id=fixture.queued_id, paused=True)
    waitingroom_services.queue_join(customer=fixture.customer, product_id=fixture.queued_id)
    waitingroom_services.queue_advance(product_id=fixture.queued_id)


def cancel_pending(fixture: Fixture) -> int:
    """Cancel every pending order of the bench customer through the service (units back, ledger rows written)."""
    from orders import services
    from orders.exceptions import OrderNotPending
    from orders.models import Order

    ids = list(
        Order.objects.filter(customer=fixture.customer, status=Order.Status.PENDING_PAYMENT).values_list(
            "pk", flat=True
        )
    )
    cancelled = 0
    for order_id in ids:
        try:
            services.order_cancel(order_id=order_id, customer=fixture.customer)
            cancelled += 1
        except OrderNotPending:  # a sweeper got there first: also fine
            pass
    return cancelled


def _host() -> str:
    from django.conf import settings

    for host in settings.ALLOWED_HOSTS:
        if host != "*" and not host.startswith("."):
            return host
    return "localhost"


class ScenarioError(RuntimeError):
    pass


def wsgi_request(
    method: str,
    path: str,
    *,
    expected: int,
    body: bytes = b"",
    headers: Mapping[str, str] | None = None,
    handler: Any = None,
) -> Callable[[], bytes]:
    """A zero-argument callable that sends one request through the WSGI handler, checks the status code and
    returns the body. The environ is prepared once and copied per call (``wsgi.input`` is a fresh BytesIO)."""
    from django.core.handlers.wsgi import WSGIHandler

    handler = handler or WSGIHandler()
    base = {
        "REQUEST_METHOD": method,
        "SCRIPT_NAME": "",
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_NAME": _host(),
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_HOST": _host(),
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": False,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    for name, value in (headers or {}).items():
        key = name.upper().replace("-", "_")
        base[key if key in ("CONTENT_TYPE", "CONTENT_LENGTH") else f"HTTP_{key}"] = value
    status: list[str] = []

    def start_response(line: str, response_headers: list, exc_info: Any = None) -> Callable[[bytes], None]:
        status.append(line)
        return lambda data: None

    def call() -> bytes:
        environ = dict(base)
        environ["wsgi.input"] = io.BytesIO(body)
        status.clear()
        response = handler(environ, start_response)
        try:
            content = b"".join(response)
        finally:
            response.close()  # fires request_finished, as a WSGI server does
        code = int(status[0][:3])
        if code != expected:
            raise ScenarioError(f"{method} {path}: expected {expected}, got {status[0]}: {content[:500]!r}")
        return content

    return call


def scenario_callables(fixture: Fixture, names: Iterable[str]) -> dict[str, Callable[[], bytes]]:
    from django.core.handlers.wsgi import WSGIHandler

    handler = WSGIHandler()
    auth = {"Authorization": f"Bearer {fixture.token}", "Content-Type": "application/json"}

    def checkout_body(product_id: int) -> bytes:
        return json.dumps({"items": [{"product_id": product_id, "qty": 1}]}).encode()

    builders = {
        "healthz": lambda: wsgi_request("GET", "/healthz", expected=200, handler=handler),
        "product_get": lambda: wsgi_request("GET", f"/v1/products/{fixture.product_id}", expected=200, handler=handler),
        "checkout_sold_out": lambda: wsgi_request(
            "POST",
            "/v1/checkout",
            expected=409,
            body=checkout_body(fixture.sold_out_id),
            headers=auth,
            handler=handler,
        ),
        "checkout": lambda: wsgi_request(
            "POST", "/v1/checkout", expected=201, body=checkout_body(fixture.product_id), headers=auth, handler=handler
        ),
        # A waiting pass's poll (GET /v1/products/<id>/queue), against the sold-out 409 (issue 25: "a poll costs no
        # more CPU than today's sold-out 409").
        "queue_poll": lambda: wsgi_request(
            "GET", f"/v1/products/{fixture.queued_id}/queue", expected=200, headers=auth, handler=handler
        ),
    }
    return {name: builders[name]() for name in names}


def environment() -> dict[str, Any]:
    import django
    from django.conf import settings
    from django.db import connection

    db = settings.DATABASES["default"]
    connection.ensure_connection()
    pg = connection.pg_version
    return {
        "python": platform.python_version(),
        "django": django.get_version(),
        "postgresql": f"{pg // 10000}.{pg % 10000}",
        "database": "DATABASE_URL" if os.environ.get("DATABASE_URL") else "embedded (.data/pg)",
        "DB_CONN_MAX_AGE": db["CONN_MAX_AGE"],
        "DB_CONN_HEALTH_CHECKS": db["CONN_HEALTH_CHECKS"],
        "DB_PREPARED_STATEMENTS": settings.DB_PREPARED_STATEMENTS,
        "DEBUG": settings.DEBUG,
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
    }


def backend_cpu_seconds() -> float | None:
    """utime + stime of the PostgreSQL backend serving Django's connection, from /proc (None when the server runs
    elsewhere). The connection must stay the same for the whole run (DB_CONN_MAX_AGE=600, no health checks)."""
    from django.db import connection

    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _audit() -> set[str]:
    from orders.audit import audit_inventory

    return {str(v) for v in audit_inventory()}


def measure(
    scenarios: Iterable[str] | None = None, rounds: int = 7, requests: int = 300, warmup: int = 50
) -> dict[str, Stats]:
    """Run the HTTP scenarios (default: all of ``SCENARIOS``) and return their stats (see ``measure_callables``).

    Bench orders are cancelled after every checkout round and at the end, then the inventory audit must not
    report a violation that was not there before the run (raises RuntimeError otherwise)."""
    names = list(scenarios or SCENARIOS)
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        raise ValueError(f"unknown scenarios {unknown}; choose from {', '.join(SCENARIOS)}")
    setup_django()
    from django.conf import settings

    if settings.DEBUG:
        log("WARNING: DEBUG is on; every query is recorded, CPU figures are inflated")
    fixture = prepare()
    before = _audit()
    if before:
        log(f"audit before the run: {len(before)} violations already present (not from this benchmark)")
    log(
        f"products: stock {fixture.product_id}, sold out {fixture.sold_out_id}; "
        f"{rounds} rounds x {requests} requests, warm-up {warmup}; scenarios: {', '.join(names)}"
    )
    callables = scenario_callables(fixture, names)
    cleanup = {"checkout": lambda: cancel_pending(fixture)} if "checkout" in names else {}
    try:
        results = measure_callables(
            callables,
            rounds=rounds,
            requests=requests,
            warmup=warmup,
            after_round=cleanup,
            progress=True,
            server_cpu=backend_cpu_seconds,
        )
    finally:
        cancelled = cancel_pending(fixture)
        if cancelled:
            log(f"cancelled {cancelled} pending bench orders")
    new = sorted(_audit() - before)
    if new:
        raise RuntimeError("audit_inventory after the benchmark: " + "; ".join(new))
    log(f"audit_inventory: {'no violations' if not before else 'no new violations'}")
    return results


# --- where the CPU goes: cProfile by layer -------------------------------------------------------------------

# Each function's own time (tottime) is charged to the first layer whose path fragment its file contains.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("database adapter (psycopg)", ("/psycopg/", "/psycopg_c/", "/psycopg_binary/")),
    ("Django ORM and db backend", ("/django/db/",)),
    ("DRF (request, parsers, auth plumbing, renderers)", ("/rest_framework/",)),
    ("JSON (stdlib json)", ("/json/",)),
    ("logging (access log, python-json-logger)", ("/logging/", "/pythonjsonlogger/")),
    ("metrics (prometheus_client)", ("/prometheus_client/",)),
    ("Django (handler, middleware chain, URLs, signals, HTTP)", ("/django/",)),
    ("the project: middleware, auth, validation", ("/skincare/",)),
    ("the project: services and SQL (payments, inventory, orders)", ("/payments/", "/inventory/", "/orders/")),
)
OTHER_LAYER = "other (stdlib, builtins)"


def layer_of(filename: str) -> str:
    for layer, fragments in LAYERS:
        if any(fragment in filename for fragment in fragments):
            return layer
    return OTHER_LAYER


def layer_profile(scenarios: Iterable[str], *, requests: int = 300, warmup: int = 50) -> dict[str, dict[str, float]]:
    """cProfile (timer: ``time.process_time``) over ``requests`` calls of each scenario after ``warmup``; returns
    ``{scenario: {layer: ms per request}}`` from each function's own time (a builtin's or another stdlib function's
    charged to the layers of its direct callers, by their share of its time), plus ``total``. Profiling slows every
    call by a similar factor, so read the shares; the absolute figures are bench.cpu's table."""
    import cProfile
    import pstats

    setup_django()
    fixture = prepare()
    names = list(scenarios)
    callables = scenario_callables(fixture, names)
    out: dict[str, dict[str, float]] = {}
    for name in names:
        fn = callables[name]
        for _ in range(warmup):
            fn()
        profiler = cProfile.Profile(time.process_time)
        gc.collect()
        profiler.enable()
        for _ in range(requests):
            fn()
        profiler.disable()
        if name == "checkout":
            cancel_pending(fixture)
        layers: dict[str, float] = {}
        stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
        for (filename, _line, _func), (_cc, _nc, tottime, _ct, callers) in stats.items():
            shares = {layer_of(filename): 1.0}
            if OTHER_LAYER in shares and callers:
                # a builtin or stdlib function (socket recv, str methods, ...) is charged to whoever called it
                total = sum(caller[3] for caller in callers.values()) or 1.0
                shares = {}
                for (caller_file, _l, _f), caller in callers.items():
                    layer = layer_of(caller_file)
                    shares[layer] = shares.get(layer, 0.0) + (caller[3] / total if total else 0.0)
            for layer, share in shares.items():
                layers[layer] = layers.get(layer, 0.0) + share * tottime * 1000 / requests
        layers["total"] = sum(layers.values())
        out[name] = layers
    return out


def layers_markdown(profile: Mapping[str, Mapping[str, float]]) -> str:
    names = list(profile)
    order = [layer for layer, _ in LAYERS] + [OTHER_LAYER]
    lines = [
        "| layer | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for layer in order:
        cells = []
        for name in names:
            ms = profile[name].get(layer, 0.0)
            cells.append(f"{ms:.3f} ({100 * ms / profile[name]['total']:.0f} %)")
        lines.append(f"| {layer} | " + " | ".join(cells) + " |")
    lines.append("| **total (profiled)** | " + " | ".join(f"{profile[n]['total']:.3f}" for n in names) + " |")
    return "\n".join(lines)


# --- output -------------------------------------------------------------------------------------------------


def _ms(value: float) -> str:
    """Milliseconds with 3 decimals; 4 significant digits below 0.1 ms (cheap callables, e.g. validation)."""
    return f"{value:.3f}" if value >= 0.1 else f"{value:.4g}"


def _scenario_rows(results: Mapping[str, Any]) -> dict[str, Stats]:
    """Only the per-scenario entries (a JSON report also holds ``python`` and ``environment``)."""
    return {k: v for k, v in results.items() if isinstance(v, Mapping) and "median_ms" in v}


def _ratio(rows: Mapping[str, Stats], name: str) -> str:
    base = rows.get("healthz")
    if not base or not base["median_ms"]:
        return "-"
    return f"{rows[name]['median_ms'] / base['median_ms']:.1f}"


def markdown_table(results: Mapping[str, Any]) -> str:
    """scenario | Python CPU per request (median ms) | min | max | ratio to healthz | PostgreSQL backend CPU."""
    rows = _scenario_rows(results)
    lines = [
        "| scenario | Python CPU per request (median ms) | min | max | ratio to healthz | PostgreSQL backend CPU (median ms) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in rows.items():
        pg = _ms(r["pg_median_ms"]) if "pg_median_ms" in r else "-"
        lines.append(
            f"| {name} | {_ms(r['median_ms'])} | {_ms(r['min_ms'])} | {_ms(r['max_ms'])} | {_ratio(rows, name)} | {pg} |"
        )
    return "\n".join(lines)


def text_table(results: Mapping[str, Any]) -> str:
    rows = _scenario_rows(results)
    header = ("scenario", "CPU ms/req (median)", "min", "max", "wall ms/req", "CPU/wall", "x healthz", "n x rounds",
              "PG backend ms/req")  # fmt: skip
    body = [
        (
            name,
            f"{_ms(r['median_ms'])}",
            f"{_ms(r['min_ms'])}",
            f"{_ms(r['max_ms'])}",
            f"{_ms(r['wall_median_ms'])}",
            f"{100 * r['median_ms'] / r['wall_median_ms']:.0f} %" if r["wall_median_ms"] else "-",
            _ratio(rows, name),
            f"{r['n']} x {r['rounds']}",
            _ms(r["pg_median_ms"]) if "pg_median_ms" in r else "-",
        )
        for name, r in rows.items()
    ]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]

    def fmt(row: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))

    return "\n".join([fmt(header), fmt(tuple("-" * w for w in widths)), *(fmt(row) for row in body)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.cpu", description="In-process Python CPU per request (see the module docstring)."
    )
    parser.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help=f"comma-separated; default {','.join(SCENARIOS)}"
    )
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds per scenario (default 7)")
    parser.add_argument("--requests", type=int, default=300, help="requests per round (default 300)")
    parser.add_argument("--warmup", type=int, default=50, help="untimed requests per scenario first (default 50)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table instead of the text table")
    parser.add_argument("--layers", action="store_true", help="cProfile each scenario; print ms per layer instead")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenarios {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    if args.layers:
        print(layers_markdown(layer_profile(names, requests=args.requests, warmup=args.warmup)))
        return 0
    try:
        results = measure(names, rounds=args.rounds, requests=args.requests, warmup=args.warmup)
    except (ScenarioError, RuntimeError) as exc:
        log(f"FAILED: {exc}")
        return 1
    env = environment()
    log("environment: " + ", ".join(f"{k}={v}" for k, v in env.items()))
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**results, "python": env["python"], "environment": env}, indent=2) + "\n")
        log(f"wrote {path}")
    print(markdown_table(results) if args.markdown else text_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
