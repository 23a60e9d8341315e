"""Python CPU per request, measured in-process: steadier than throughput on a noisy 2-core machine, so it is what an
A/B of two commits compares.

    python -m bench cpu                                # 7 rounds x 300 requests per scenario, the development database
    python -m bench cpu --rounds 3 --requests 100      # a quick look
    python -m bench cpu --against f601d59              # A/B against another commit (bench.ab)
    python -m bench cpu --only queue_poll              # one scenario (and healthz, its baseline); repeatable

Method. Django is set up in a worker process against the real PostgreSQL (no mocks); each request is a call of
``django.core.handlers.wsgi.WSGIHandler()`` with a prepared WSGI environ, so it walks the whole stack as a gunicorn
worker does (signals, every middleware, URL resolution, authentication, the view, the services, JSON rendering);
every answer's status is checked. Each scenario is warmed up, then timed in rounds of N requests with
``time.process_time()`` (this process's CPU, user + system); rounds of the scenarios are interleaved, their order
rotated every round, so a burst of noise spreads over all of them. The PostgreSQL backend serving the worker's one
connection is read from /proc over each round too (its CPU per request). Reported: the median over the rounds.
The sold-out refusal, the signed poll and the join run once more through DRF's own dispatch in front of the same view
methods (``through_drf``, routed under ``DRF_PREFIX`` by a URLconf made in the worker), so each pair of scenarios
prices the project's pipeline against DRF's request handling.
After every checkout round the worker cancels its pending orders through the API (untimed); ``manage.py
audit_inventory`` must pass at the end.

The worker (``--worker``) imports nothing from this repository's tooling, only Django and the application of the
tree it runs in: bench.ab runs this same file in a checkout of another commit. Its data: the customer
``cpu-bench-customer`` and two products (a huge stock, sold out), created once per database and reused.
"""

import argparse
import gc
import io
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SCENARIOS = (
    "healthz",
    "product_get",
    "checkout_sold_out",
    "checkout_sold_out_limited",
    "checkout",
    "queue_poll",
    "queue_poll_unsigned",
    "queue_join",
    "checkout_sold_out_drf",
    "queue_poll_drf",
    "queue_join_drf",
)
# The scenarios that serve an endpoint through DRF's own dispatch (:func:`_drf_views`), each named after the scenario
# it repeats: what the endpoint would cost without the project's pipeline.
THROUGH_DRF = ("checkout_sold_out_drf", "queue_poll_drf", "queue_join_drf")
# Where those plain views are routed: under /v1/, so the middleware treats them as the API (skincare.middleware).
DRF_PREFIX = "v1/bench-drf/"
CUSTOMER = "cpu-bench-customer"
SKUS = {
    "stock": ("cpu-bench-stock", 10_000_000),
    "sold_out": ("cpu-bench-sold-out", 0),
    "queued": ("cpu-bench-queued", 10_000_000),
}
# CHECKOUT_RATE_LIMIT of the scenarios with the rate limit on (production turns it on): never reached by a run.
RATE_LIMIT = "100000000/minute"
# The bench customer's pass waits this far back in the queued product's line (nobody is ever admitted: no advance).
QUEUE_POSITION = 1_000_000


def settings_module(tree: Path) -> str:
    """The project's settings module in ``tree``: config.settings, or skincare.settings before config/ existed."""
    return "config.settings" if (tree / "config/settings.py").exists() else "skincare.settings"


# --- the worker (Django, the tree's application) -----------------------------------------------------------------


def _product(key: str) -> int:
    from decimal import Decimal

    from inventory import catalogue
    from inventory.models import Product

    sku, stock = SKUS[key]
    product = Product.objects.filter(sku=sku).first()
    if product is None:
        product = catalogue.product_create(
            sku=sku, name=f"{sku} (bench only)", price=Decimal(1000), initial_stock=stock
        )
    return int(product.pk)


def _request(
    handler: Any,
    method: str,
    path: str,
    expected: int,
    body: bytes = b"",
    token: str = "",
    headers: dict[str, str] | None = None,
) -> Callable[[], bytes]:
    """A zero-argument callable sending one request through ``handler`` and checking its status."""
    base = {
        "REQUEST_METHOD": method,
        "SCRIPT_NAME": "",
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_NAME": "localhost",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_HOST": "localhost",
        "CONTENT_LENGTH": str(len(body)),
        "CONTENT_TYPE": "application/json",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": False,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    if token:
        base["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    base.update(headers or {})
    status: list[str] = []

    def start_response(line: str, headers: list, exc_info: Any = None) -> Callable[[bytes], None]:
        status[:] = [line]
        return lambda data: None

    def call() -> bytes:
        response = handler({**base, "wsgi.input": io.BytesIO(body)}, start_response)
        try:
            content = b"".join(response)
        finally:
            response.close()  # request_finished, as a WSGI server sends it
        if int(status[0][:3]) != expected:
            raise RuntimeError(f"{method} {path}: expected {expected}, got {status[0]}: {content[:300]!r}")
        return content

    return call


def _rate_limited(call: Callable[[], bytes]) -> tuple[Callable[[], bytes], Callable[[], None]]:
    """``call`` with ``CHECKOUT_RATE_LIMIT`` on (:data:`RATE_LIMIT`), as production serves a checkout, and what turns
    it off again after the scenario's round: the setting is switched once per round, outside the requests' figure."""
    from django.conf import settings

    before = settings.CHECKOUT_RATE_LIMIT

    def limited() -> bytes:
        if settings.CHECKOUT_RATE_LIMIT != RATE_LIMIT:  # the round's first request
            settings.CHECKOUT_RATE_LIMIT = RATE_LIMIT
        return call()

    def off() -> None:
        settings.CHECKOUT_RATE_LIMIT = before

    return limited, off


def _backend_cpu() -> float:
    """CPU seconds of the PostgreSQL backend serving this process (0 when the server runs elsewhere)."""
    from django.db import connection

    connection.ensure_connection()
    try:
        fields = Path(f"/proc/{connection.connection.info.backend_pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def through_drf(view_class: Any) -> Callable[..., Any]:
    """``view_class`` served by DRF's own request handling instead of the project's pipeline: DRF's ``Request``,
    content negotiation, authentication and permission steps and ``finalize_response``, in front of the same view
    methods, errors answered by the API's one exception handler and every answer counted on /metrics as the endpoint
    counts it. Not a second path of the service: the benchmark's measure of what the decision for a pipeline of the
    project's own (``skincare.apiview.ApiView.dispatch``) saves on each request."""
    from django.views import View
    from rest_framework.views import APIView

    from skincare.api import exception_handler

    def dispatch(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        response = APIView.dispatch(self, request, *args, **kwargs)
        if hasattr(self, "count_answer"):
            self.count_answer(started, self.outcome(response))
        return response

    def initialize_request(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        drf_request = APIView.initialize_request(self, request, *args, **kwargs)
        drf_request.http = request  # what the views read as skincare.api.ApiRequest.http
        return drf_request

    attributes = {
        "setup": View.setup,  # Django's own (HEAD answered by get, as DRF expects)
        "dispatch": dispatch,
        "initialize_request": initialize_request,
        "get_exception_handler": lambda self: exception_handler,
    }
    attributes["__doc__"] = view_class.__doc__  # its name and description, as OPTIONS shows them
    return type(view_class.__name__, (view_class,), attributes).as_view()


def _drf_views() -> bool:
    """Route :data:`DRF_PREFIX` + the refusal's, the signed poll's and the join's paths to their endpoints served
    through DRF's dispatch (:func:`through_drf`), in a URLconf module made here: the project's routes, with each
    app's DRF routes just before the app's own, so such a path is resolved through as many routes as its endpoint's
    path. False in a tree whose views are not where this looks (an A/B's older side)."""
    import importlib
    import types

    from django.conf import settings
    from django.urls import include, path

    try:
        from checkout.api import CheckoutApi
        from waitingroom.api import QueueApi, QueuePassApi
    except ImportError:
        return False
    routed = {
        "checkout.urls": [path("checkout", through_drf(CheckoutApi))],
        "waitingroom.urls": [
            path("products/<id:product_id>/queue", through_drf(QueueApi)),
            path("queue/passes/<id:pass_id>", through_drf(QueuePassApi)),
        ],
    }
    project = importlib.import_module(settings.ROOT_URLCONF)
    urls = types.ModuleType("bench_drf_urls")
    patterns: list[Any] = []
    for route in project.urlpatterns:
        app = getattr(getattr(route, "urlconf_name", None), "__name__", None)  # an included module's name
        if app in routed:
            patterns.append(path(DRF_PREFIX, include(routed.pop(app))))
        patterns.append(route)
    if routed:  # an app's routes are not included where this looks
        return False
    urls.urlpatterns = patterns  # type: ignore[attr-defined]
    for name in ("handler400", "handler403", "handler404", "handler500"):
        setattr(urls, name, getattr(project, name))
    sys.modules[urls.__name__] = urls
    settings.ROOT_URLCONF = urls.__name__
    return True


def _queue_polls(handler: Any, token: str) -> dict[str, Callable[[], bytes]]:
    """A waiting pass's poll with its signed pass (the process's queue counters, no statement while fresh) and
    without it (the pass read from the database); none in a tree without signed passes (an A/B's older side)."""
    try:
        from waitingroom import passtoken, services
        from waitingroom.models import QueuePass
    except ImportError:
        return {}
    from django.contrib.auth.models import User
    from django.db import connection

    customer = User.objects.get(username=CUSTOMER)
    product_id = _product("queued")
    services.queue_set(product_id=product_id, admit_per_second=1)
    # A pass left by an earlier run would be kept instead of this run's (one pass per customer and product): gone.
    QueuePass.objects.filter(customer=customer, product_id=product_id).delete()
    queue_pass, _created = services.queue_join(customer=customer, product_id=product_id)
    log = _join_log()
    if log is not None:
        log.flush()
    with connection.cursor() as cursor:  # far back in line: waiting for the whole run
        cursor.execute(
            "UPDATE queue_passes SET position = %s, admitted_at = NULL, admitted_until = NULL, used_at = NULL "
            "WHERE id = %s",
            [QUEUE_POSITION, queue_pass.pass_id],
        )
    fields = {"pass_id": queue_pass.pass_id, "product_id": product_id, "customer_id": customer.pk}
    if hasattr(queue_pass, "queue_created_us"):  # a pass names its queue (an A/B's older side: it does not)
        fields["queue_created_us"] = queue_pass.queue_created_us
    signed = passtoken.SignedPass(position=QUEUE_POSITION, **fields)
    path = f"/v1/queue/passes/{queue_pass.pass_id}"
    header = {passtoken.META_HEADER: passtoken.pass_sign(signed)}
    return {
        "queue_poll": _request(handler, "GET", path, 200, token=token, headers=header),
        "queue_poll_unsigned": _request(handler, "GET", path, 200, token=token),
        "queue_poll_drf": _request(
            handler, "GET", f"/{DRF_PREFIX}{path.removeprefix('/v1/')}", 200, token=token, headers=header
        ),
    }


def _join_log() -> Any:
    """This process's log of joins answered and not yet written; None in a tree that writes each join at once (an
    A/B's older side)."""
    try:
        from waitingroom.joins import JOINS
    except ImportError:
        return None
    return JOINS


# Joins per batch in the join scenario: a web process's share of 833 joins/s (50,000 in a minute, three workers)
# in one QUEUE_JOIN_FLUSH_MS of 200 ms is about 55.
JOIN_BATCH = 50


def _queue_joins(
    handler: Any, joiners: int, *, name: str = "queue_join", prefix: str = "/v1/"
) -> tuple[dict[str, Callable[[], bytes]], dict[str, Callable[[], object]]]:
    """``name``: each call a join of the queued product by one of ``joiners`` customers of its own that has no pass
    (a new pass: 201) at ``prefix`` + the join's path, and what clears their passes after a round (untimed); none
    in a tree without a waiting room."""
    try:
        from waitingroom import services
        from waitingroom.models import QueuePass
    except ImportError:
        return {}, {}
    from django.contrib.auth.models import User

    from skincare import services as skincare_services

    product_id = _product("queued")
    services.queue_set(product_id=product_id, admit_per_second=1)
    users = [User.objects.get_or_create(username=f"{CUSTOMER}-{name}-{i}")[0] for i in range(joiners)]
    path = f"{prefix}products/{product_id}/queue"
    calls = [_request(handler, "POST", path, 201, token=skincare_services.api_token_issue(user=u)) for u in users]
    turn = itertools.cycle(calls)
    log = _join_log()
    joined = itertools.count(1)

    def join() -> bytes:
        """A join; every JOIN_BATCH-th also writes the batch on this thread, so its cost is in the figures (the
        worker's flush thread is off: QUEUE_JOIN_FLUSH_MS in worker_env)."""
        content = next(turn)()
        if log is not None and next(joined) % JOIN_BATCH == 0:
            log.flush()
        return content

    def clear() -> None:
        if log is not None:
            log.flush()
            log.forget()
        QueuePass.objects.filter(product_id=product_id, customer__in=users).delete()

    clear()
    return {name: join}, {name: clear}


def measure(
    callables: dict[str, Callable[[], object]],
    *,
    rounds: int,
    requests: int,
    warmup: int,
    after_round: dict[str, Callable[[], object]],
) -> dict[str, dict[str, Any]]:
    """Each callable warmed up, then ``rounds`` interleaved rounds of ``requests`` calls; per scenario the median
    Python CPU and PostgreSQL backend CPU per call (ms) and each round's Python figure."""
    names = list(callables)
    for name in names:
        for _ in range(warmup):
            callables[name]()
        after_round.get(name, lambda: None)()
    cpu: dict[str, list[float]] = {n: [] for n in names}
    pg: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            fn = callables[name]
            gc.collect()
            pg0, cpu0 = _backend_cpu(), time.process_time()
            for _ in range(requests):
                fn()
            cpu1, pg1 = time.process_time(), _backend_cpu()
            cpu[name].append((cpu1 - cpu0) * 1000 / requests)
            pg[name].append((pg1 - pg0) * 1000 / requests)
            after_round.get(name, lambda: None)()
    return {
        n: {
            "python_cpu_ms": statistics.median(cpu[n]),
            "pg_cpu_ms": statistics.median(pg[n]),
            "rounds_ms": [round(v, 4) for v in cpu[n]],
        }
        for n in names
    }


def worker(rounds: int, requests: int, warmup: int, only: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    """Set up Django in this tree, prepare the data, measure every scenario (``only`` those named, and
    ``healthz``); audit at the end."""
    import django

    django.setup()
    from django.core.handlers.wsgi import WSGIHandler
    from django.core.management import call_command

    from orders.models import Order

    call_command("migrate", verbosity=0, interactive=False)
    out = io.StringIO()
    call_command("issue_token", CUSTOMER, stdout=out)
    token = out.getvalue().strip()
    stock, sold_out = _product("stock"), _product("sold_out")
    drf_routed = _drf_views()
    handler = WSGIHandler()

    def body(pid: int) -> bytes:
        return json.dumps({"items": [{"product_id": pid, "qty": 1}]}).encode()

    def cancel_pending() -> None:
        pending = Order.objects.filter(customer__username=CUSTOMER, status=Order.Status.PENDING_PAYMENT)
        for order_id in pending.values_list("pk", flat=True):
            _request(handler, "POST", f"/v1/orders/{order_id}/cancel", 200, token=token)()

    cancel_pending()
    limited, limit_off = _rate_limited(_request(handler, "POST", "/v1/checkout", 409, body(sold_out), token))
    callables: dict[str, Callable[[], object]] = {
        "healthz": _request(handler, "GET", "/healthz", 200),
        "product_get": _request(handler, "GET", f"/v1/products/{stock}", 200),
        "checkout_sold_out": _request(handler, "POST", "/v1/checkout", 409, body(sold_out), token),
        "checkout_sold_out_limited": limited,
        "checkout": _request(handler, "POST", "/v1/checkout", 201, body(stock), token),
        "checkout_sold_out_drf": _request(handler, "POST", f"/{DRF_PREFIX}checkout", 409, body(sold_out), token),
        **_queue_polls(handler, token),
    }
    clear_joins: dict[str, Callable[[], object]] = {}
    for name, prefix in (("queue_join", "/v1/"), ("queue_join_drf", f"/{DRF_PREFIX}")):
        joins, clear = _queue_joins(handler, max(requests, warmup), name=name, prefix=prefix)  # each a new pass
        callables.update(joins)
        clear_joins.update(clear)
    if not drf_routed:
        callables = {name: call for name, call in callables.items() if name not in THROUGH_DRF}
    try:
        if only:
            callables = {name: call for name, call in callables.items() if name in only or name == "healthz"}
        results = measure(
            callables,
            rounds=rounds,
            requests=requests,
            warmup=warmup,
            after_round={"checkout": cancel_pending, "checkout_sold_out_limited": limit_off, **clear_joins},
        )
    finally:
        cancel_pending()
    call_command("audit_inventory", verbosity=0)
    return results


# --- running a worker, the command line --------------------------------------------------------------------------


def worker_env(tree: Path, url: str) -> dict[str, str]:
    """The environment of a worker in ``tree`` on the database ``url``: the bench values, no pending-order cap,
    persistent connections, access lines on (as served), the developer's .env not read."""
    from skincare import demo

    env = dict(os.environ, PYTHONPATH=str(tree), DATABASE_URL=url, DJANGO_SETTINGS_MODULE=settings_module(tree))
    env.update(
        DJANGO_ENV="development",
        DJANGO_READ_DOT_ENV_FILE="false",
        LOG_LEVEL="INFO",
        MAX_PENDING_ORDERS_PER_CUSTOMER="0",
        DB_CONN_MAX_AGE="600",
        QUEUE_JOIN_FLUSH_MS=str(3_600_000),  # the join scenario writes its batches itself, on the measured thread
    )
    env.update({"DJANGO_SECRET_KEY": demo.BENCH_SECRET_KEY, "PAYMENT_WEBHOOK_SECRET": demo.BENCH_WEBHOOK_SECRET})
    env.pop("DJANGO_DEBUG", None)
    return env


def run_worker(
    tree: Path, url: str, *, rounds: int, requests: int, warmup: int, only: tuple[str, ...] = ()
) -> dict[str, dict[str, Any]]:
    """This file, as a worker in ``tree`` (its application, its settings) on ``url``; its results."""
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        "--rounds",
        str(rounds),
        "--requests",
        str(requests),
        "--warmup",
        str(warmup),
        *(f"--only={name}" for name in only),
    ]
    proc = subprocess.run(cmd, cwd=tree, env=worker_env(tree, url), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"bench.cpu's worker failed in {tree}:\n{proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def rows(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The results as rows of the one table (bench.table), each scenario beside ``GET /healthz``."""
    labels = {
        "healthz": "in-process GET /healthz",
        "product_get": "in-process product GET",
        "checkout_sold_out": "in-process sold-out checkout (409)",
        "checkout_sold_out_limited": "in-process sold-out checkout (409), rate limit on",
        "checkout": "in-process checkout, one unit",
        "queue_poll": "in-process queue poll, signed pass",
        "queue_poll_unsigned": "in-process queue poll, no signed pass",
        "queue_join": "in-process queue join (a new pass, 201), the token remembered",
        "checkout_sold_out_drf": "in-process sold-out checkout (409), through DRF's dispatch",
        "queue_poll_drf": "in-process queue poll, signed pass, through DRF's dispatch",
        "queue_join_drf": "in-process queue join (a new pass, 201), the token remembered, through DRF's dispatch",
    }
    # A row through DRF's dispatch is the decision undone: compared with the same request through the pipeline.
    baselines = {name: name.removesuffix("_drf") for name in THROUGH_DRF}
    return [
        {
            "row": labels[name],
            "baseline": None if name == "healthz" else labels[baselines.get(name, "healthz")],
            "per_s": None,
            "p99_ms": None,
            "python_cpu_ms": r["python_cpu_ms"],
            "pg_cpu_ms": r["pg_cpu_ms"],
            "other_cpu_pct": None,
            "errors": 0,
            "audit_clean": True,
            "rounds": len(r["rounds_ms"]),
        }
        for name, r in results.items()
    ]


def text_table(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    """Scenario by scenario: each side's Python and PostgreSQL CPU per request, and the ratio of the first side's
    Python CPU to the second's (when there are two). A scenario one side's tree cannot run (an older commit without
    it) is named under the table, not compared."""
    sides = list(results)
    head = ["scenario"] + [f"{side}: Python / PostgreSQL ms" for side in sides]
    if len(sides) == 2:
        head.append(f"Python {sides[0]} ÷ {sides[1]}")
    lines = [" | ".join(head)]
    names = [name for name in results[sides[0]] if all(name in results[s] for s in sides)]
    for name in names:
        cells = [name] + [
            f"{results[s][name]['python_cpu_ms']:.3f} / {results[s][name]['pg_cpu_ms']:.3f}" for s in sides
        ]
        if len(sides) == 2:
            cells.append(f"{results[sides[0]][name]['python_cpu_ms'] / results[sides[1]][name]['python_cpu_ms']:.2f}")
        lines.append(" | ".join(cells))
    missing = sorted({name for side in sides for name in results[side]} - set(names))
    if missing:
        lines.append(f"not run by every side: {', '.join(missing)}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench cpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument(
        "--only", action="append", default=[], choices=SCENARIOS, help="only this scenario (and healthz); repeatable"
    )
    parser.add_argument("--against", metavar="GIT_REF", help="A/B against this commit (bench.ab)")
    parser.add_argument("--pairs", type=int, default=3, help="A/B: how many times each side runs, alternating")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """One side's measurements, printed (``python -m bench cpu``; with ``--against``, ``bench.__main__`` runs the A/B
    of :mod:`bench.ab` instead), or, with ``--worker``, the worker's (a subprocess of a run)."""
    args = parse_args(argv)
    if args.against:
        raise SystemExit("an A/B runs as python -m bench cpu --against GIT_REF")
    if args.worker:
        sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
        print(json.dumps(worker(args.rounds, args.requests, args.warmup, tuple(args.only))))
        return 0
    from devtools.processes import ROOT, server_url

    url = os.environ.get("DATABASE_URL") or server_url("skincare")
    results = run_worker(
        ROOT, url, rounds=args.rounds, requests=args.requests, warmup=args.warmup, only=tuple(args.only)
    )
    print(text_table({"this tree": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
