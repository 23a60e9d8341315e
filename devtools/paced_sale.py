"""``make paced-sale``: a flash sale through a waiting room whose buyers all open their Xendit payment page at once,
and the proof that the shop's page pace keeps every web process within Xendit's rate limit.

The shop runs as production serves it (gunicorn with --workers processes, default 2, so the pace is shared through
the database's ``payment_session_pace`` row; the looping sweeper, which also advances the queue) with
``PAYMENT_GATEWAY=xendit`` pointed at the fake (``devtools/fake_xendit.py``), started in this process with Xendit's
published limit (``limit_per_second=10``: a create past 10 accepted in the last second is answered 429), and
``PAYMENT_SESSIONS_PER_SECOND`` = --rate (default 8, the shop's default with Xendit; 0 = not paced). The flash
product gets --units units (default 300) and a fresh queue at the opening pace (``flash_sale_setup --stock N --queue
--admit-per-second R``, R = --admit-per-second, by default --rate; when --rate is 0, the shop's own default pace
without a page pace, ``QUEUE_ADMIT_PER_SECOND`` = 10). --units buyers join the queue at the opening, poll as
``poll_after`` says, check out once admitted and open their ``payment_url`` at once (no redirect followed: the 302 to
the fake's ``invoice_url`` is the page), obeying ``Retry-After`` on a 503; each then pays on the fake and the fake's
callback is posted to ``POST /v1/payments/xendit/notification``. Reservations last --reservation-ttl seconds
(default 300): with Xendit's 180 s margin and its one-minute shortest page, a page must open within a minute of its
checkout, so pages that fall behind the admissions cost buyers their order. A buyer refused a page comes back at
its turn (the answer's ``turn_in_ms``, as the shop's waiting page does), or with ``--header-only`` after Retry-After
as sent (whole seconds); ``--jitter S`` makes each buyer add up to S seconds at random to every wait (default 0). ``reconcile_payments`` then
asks Xendit about every order at the fake's limit, at the shop's pace (``PAYMENT_SESSIONS_PER_SECOND``).

Measured and printed: the sessions created per second at the fake (the most accepted creates in any sliding second,
the most asked for in any second, 429s included, and the mean rate while creating), the wait from a buyer's
checkout to its page (p50, p99, max), the 503s answered (``payment_pages_paced``, ``gateway_unavailable``), the 429s
the fake answered (per endpoint) and those the buyers saw. The proof, exit code 1 listing every failed check: the
buyers saw no 429 (the shop never passes one on); every order's session was created (``payment_sessions.created_at``)
before its deadline less the margin, by the database; orders paid = --units; ``audit_inventory`` clean and
``reconcile_payments`` with nothing to report; no 5xx but the honest 503s, no request unanswered, no error logged;
and, when paced, the fake refused no create and none of reconciliation's calls, and no more creates were asked for
than its limit in any second.

    python -m devtools.paced_sale                        # 300 buyers at 8 pages/s, on a database of its own
    python -m devtools.paced_sale --units 40             # the size make test runs (payments/tests/test_paced_sale.py)
    python -m devtools.paced_sale --units 40 --rate 0    # the control: not paced, the fake refuses pages
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import os
import random
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse, urlsplit

from devtools.fake_xendit import FakeXendit
from devtools.processes import (
    RESULTS,
    Gunicorn,
    Sweepers,
    admin_conninfo,
    ctl,
    log,
    manage,
    query,
    server_url,
)

FLASH_PRODUCT = 101
CUSTOMER_PREFIX = "paced"
DATABASE = "skincare_paced"  # the rehearsal's own database when none is given
NOTIFICATION_PATH = "/v1/payments/xendit/notification"
XENDIT_LIMIT_PER_SECOND = 10  # Xendit's published per-endpoint limit
MARGIN_SECONDS = 180  # XENDIT_EXPIRY_MARGIN_SECONDS, set explicitly for the shop's processes
UNPACED_QUEUE_PACE = 10  # QUEUE_ADMIT_PER_SECOND's default when PAYMENT_SESSIONS_PER_SECOND is 0
HONEST_503 = ("payment_pages_paced", "gateway_unavailable")
ATTEMPTS = 200  # a buyer's retries of one step before the run calls it stuck


class CountingFakeXendit(FakeXendit):
    """The fake, recording every request its rate limit judged: (endpoint, the instant it counted in ms, accepted)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.judged: list[tuple[str, int, bool]] = []

    def _admit(self, endpoint: str) -> bool:
        with self._lock:  # re-entrant: the instant read is the one the limit appended
            accepted = super()._admit(endpoint)
            arrivals = self._arrivals[endpoint]
            at = arrivals[-1] if accepted and self.limit_per_second is not None else self._now_ms()
            self.judged.append((endpoint, at, accepted))
        return accepted

    def instants(self, endpoint: str, *, accepted_only: bool) -> list[int]:
        with self._lock:
            return sorted(
                at for name, at, accepted in self.judged if name == endpoint and (accepted or not accepted_only)
            )

    def refused(self) -> Counter[str]:
        with self._lock:
            return Counter(name for name, _at, accepted in self.judged if not accepted)


def most_in_a_second(instants_ms: list[int]) -> int:
    """The most instants in any sliding second (the fake's window: (t - 1000 ms, t]); ``instants_ms`` sorted."""
    most, first = 0, 0
    for last, at in enumerate(instants_ms):
        while instants_ms[first] <= at - 1000:
            first += 1
        most = max(most, last - first + 1)
    return most


def percentile(values: list[float], p: float) -> float:
    """The nearest-rank percentile (0 for none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


@dataclass
class Run:
    args: argparse.Namespace
    url: str
    fake: CountingFakeXendit
    rng: random.Random
    base: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)
    answers: Counter[str] = field(default_factory=Counter)  # "<kind>:<status>[:<code>]" of every request to the shop
    page_waits: list[float] = field(default_factory=list)  # seconds from a buyer's checkout answer to its page
    failures: list[str] = field(default_factory=list)
    started: int = field(default_factory=time.time_ns)

    def count(self, key: str) -> None:
        with self.lock:
            self.answers[key] += 1

    def fail(self, message: str) -> None:
        with self.lock:
            self.failures.append(message)


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


OPENER = urllib.request.build_opener(NoRedirect)


def request(
    run: Run,
    kind: str,
    method: str,
    path: str,
    *,
    token: str = "",
    body: Any = None,
    raw: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], Any]:
    """One request to the shop; (status, headers, JSON body). No answer is status 0."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    sent = {"Content-Type": "application/json", **(headers or {})}
    if token:
        sent["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(run.base + path, data=data, method=method, headers=sent)
    try:
        with OPENER.open(req, timeout=30) as resp:
            status, answer_headers, raw_body = resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        status, answer_headers, raw_body = exc.code, dict(exc.headers), exc.read()
    except OSError:
        status, answer_headers, raw_body = 0, {}, b""
    try:
        payload = json.loads(raw_body) if raw_body else None
    except ValueError:
        payload = None
    code = payload.get("code") if isinstance(payload, dict) and status >= 400 else None
    run.count(f"{kind}:{status}" + (f":{code}" if code else ""))
    return status, answer_headers, payload


def retry_after(run: Run, headers: dict[str, str], answer: object = None) -> float:
    """The buyer returns at its page's turn (``turn_in_ms``, as the shop's waiting page does) when the answer
    names one and --header-only is not given, else after Retry-After as sent (whole seconds); plus up to --jitter
    seconds drawn at random."""
    turn_in_ms = answer.get("turn_in_ms") if isinstance(answer, dict) else None
    if isinstance(turn_in_ms, int) and not run.args.header_only:
        wait = turn_in_ms / 1000
    else:
        try:
            wait = max(0.0, float(headers.get("Retry-After", "1")))
        except ValueError:
            wait = 1.0
    return wait + (run.rng.uniform(0, run.args.jitter) if run.args.jitter else 0.0)


def retryable(status: int) -> bool:
    return status == 503


def buyer(run: Run, i: int, token: str) -> None:
    """Join at the opening, poll as told, check out once admitted, open the page at once, pay, be notified."""
    # 1. Join.
    for _ in range(ATTEMPTS):
        status, headers, joined = request(run, "join", "POST", f"/v1/products/{FLASH_PRODUCT}/queue", token=token)
        if status in (200, 201):
            break
        if not retryable(status):
            run.fail(f"buyer {i}: join answered {status} {joined}")
            return
        time.sleep(retry_after(run, headers))  # pacing: the buyer obeys Retry-After
    else:
        run.fail(f"buyer {i}: never joined")
        return
    state, pass_token = joined["state"], joined["pass_token"]
    poll_url, poll_header, wait = joined["poll_url"], joined["poll_header"], joined["poll_after"]
    # 2. Poll as poll_after says, until admitted.
    for _ in range(ATTEMPTS):
        if state == "admitted":
            break
        if state != "waiting":
            run.fail(f"buyer {i}: the pass ended {state}")
            return
        time.sleep(wait)  # pacing: the buyer polls when poll_after says
        status, headers, polled = request(run, "poll", "GET", poll_url, token=token, headers={poll_header: pass_token})
        if status == 200:
            state, wait = polled["state"], polled["poll_after"]
            pass_token = polled.get("pass_token") or pass_token
        elif retryable(status):
            wait = retry_after(run, headers)
        else:
            run.fail(f"buyer {i}: poll answered {status} {polled}")
            return
    else:
        run.fail(f"buyer {i}: never admitted")
        return
    # 3. Check out with the admission.
    key = f"paced-{run.started}-{i}"
    for _ in range(ATTEMPTS):
        status, headers, order = request(
            run,
            "checkout",
            "POST",
            "/v1/checkout",
            token=token,
            body={"items": [{"product_id": FLASH_PRODUCT, "qty": 1}]},
            headers={"Idempotency-Key": key},
        )
        if status == 201:
            break
        if not (retryable(status) or (status == 409 and "Retry-After" in headers)):
            run.fail(f"buyer {i}: checkout answered {status} {order}")
            return
        time.sleep(retry_after(run, headers))  # pacing: the buyer obeys Retry-After
    else:
        run.fail(f"buyer {i}: no checkout")
        return
    checked_out = time.monotonic()
    # 4. Open the payment page at once; a 302 to the fake's invoice_url is the page.
    link = urlsplit(order["payment_url"]).path
    for _ in range(ATTEMPTS):
        status, headers, answer = request(run, "page", "GET", link)
        if status == 302:
            break
        if not retryable(status):
            run.fail(f"buyer {i}: payment page answered {status} {answer}")
            return
        time.sleep(retry_after(run, headers, answer))  # pacing: the buyer comes back at its turn
    else:
        run.fail(f"buyer {i}: no payment page")
        return
    with run.lock:
        run.page_waits.append(time.monotonic() - checked_out)
    # 5. Pay on the invoice page; Xendit posts its callback (retried, as Xendit does, on anything but a 2xx).
    invoice_id = headers["Location"].rsplit("/", 1)[-1]
    invoice = run.fake.invoices.get(invoice_id)
    if invoice is None:
        run.fail(f"buyer {i}: redirected to {headers['Location']}, not an invoice of the fake")
        return
    callback_headers, callback_body = run.fake.callback(run.fake.pay(invoice["external_id"]))
    for _ in range(ATTEMPTS):
        status, headers, answer = request(
            run, "notification", "POST", NOTIFICATION_PATH, raw=callback_body, headers=callback_headers
        )
        if status == 200:
            if not isinstance(answer, dict) or answer.get("status") != "paid":
                run.fail(f"buyer {i}: the callback of order {order['order_id']} answered {answer}")
            return
        if not retryable(status):
            run.fail(f"buyer {i}: the callback answered {status} {answer}")
            return
        time.sleep(retry_after(run, headers))  # pacing: Xendit's retry of a callback
    run.fail(f"buyer {i}: the callback was never accepted")


def database_ready(url: str) -> None:
    """The rehearsal's own database: created when missing, migrated, the demo catalogue loaded."""
    import psycopg

    name = urlparse(url).path.lstrip("/")
    if not name.startswith(DATABASE):
        raise SystemExit(f"refusing to create {name!r}: only {DATABASE}*")
    with psycopg.connect(admin_conninfo(url), autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{name}"')
    manage(url, "migrate", "--noinput", "-v0")
    manage(url, "load_demo_data", quiet=True)


def prove(run: Run, since: str, env: dict[str, str]) -> dict[str, Any]:
    """The database's word on every order of this run, then audit_inventory and reconcile_payments."""
    rows = query(
        run.url,
        "SELECT o.id, o.status, s.created_at IS NOT NULL AND s.redirect_url <> '', "
        f"extract(epoch FROM (o.payment_expires_at - make_interval(secs => {MARGIN_SECONDS})) - s.created_at)::float "
        "FROM orders o JOIN auth_user u ON u.id = o.customer_id LEFT JOIN payment_sessions s ON s.order_id = o.id "
        f"WHERE u.username LIKE '{CUSTOMER_PREFIX}-%' AND o.created_at >= '{since}'",
    )
    units = run.args.units
    paid = sum(1 for _id, status, _page, _left in rows if status == "paid")
    if len(rows) != units:
        run.fail(f"{len(rows)} orders of this run in the database, {units} buyers")
    if paid != units:
        run.fail(f"{paid} orders paid, {units} units sold")
    without_page = [order_id for order_id, _status, page, _left in rows if not page]
    late = [(order_id, left) for order_id, _status, page, left in rows if page and left <= 0]
    if without_page:
        run.fail(f"orders without a payment page: {without_page[:10]}")
    if late:
        run.fail(f"pages opened after the deadline less the margin (order, seconds left): {late[:10]}")
    left = [left for _id, _status, page, left in rows if page]
    audit = manage(run.url, "audit_inventory", check=False, quiet=True)
    if audit.returncode != 0:
        run.fail("audit_inventory: " + (audit.stdout + audit.stderr).strip()[-400:])
    # reconcile_payments asks Xendit about every order at the shop's pace, at the fake's limit.
    refused_before, started = run.fake.refused(), time.monotonic()
    reconcile = manage(run.url, "reconcile_payments", "--since", since, check=False, quiet=True, extra_env=env)
    reconcile_seconds = time.monotonic() - started
    reconcile_429s = sum((run.fake.refused() - refused_before).values())
    if run.args.rate and reconcile_429s:
        run.fail(f"paced at {run.args.rate}/s, the fake refused {reconcile_429s} of reconcile_payments' calls")
    lines = [line for line in reconcile.stdout.strip().splitlines() if line]
    summary = lines[-1] if lines else ""
    if reconcile.returncode != 0 or not summary.startswith("reconcile_payments: 0 mismatches") or len(lines) != 1:
        run.fail("reconcile_payments reported: " + (reconcile.stdout + reconcile.stderr).strip()[-400:])
    return {
        "orders": len(rows),
        "paid": paid,
        "pages_before_deadline": len(left) - len(late),
        "least_seconds_left": round(min(left), 1) if left else None,
        "audit_clean": audit.returncode == 0,
        "reconcile_clean": reconcile.returncode == 0 and len(lines) == 1,
        "reconcile_seconds": round(reconcile_seconds, 1),
        "reconcile_429s": reconcile_429s,
    }


def measure(run: Run) -> dict[str, Any]:
    accepted = run.fake.instants("create", accepted_only=True)
    asked = run.fake.instants("create", accepted_only=False)
    span = (accepted[-1] - accepted[0]) / 1000 if len(accepted) > 1 else 0.0
    refused = run.fake.refused()
    waits = run.page_waits
    answers = run.answers
    return {
        "sessions_created": len(accepted),
        "max_sessions_in_any_second": most_in_a_second(accepted),
        "max_creates_asked_in_any_second": most_in_a_second(asked),
        "mean_sessions_per_second": round((len(accepted) - 1) / span, 2) if span else None,
        "creating_seconds": round(span, 1),
        "page_wait_p50": round(percentile(waits, 50), 2),
        "page_wait_p99": round(percentile(waits, 99), 2),
        "page_wait_max": round(max(waits), 2) if waits else 0.0,
        "payment_pages_paced": sum(n for k, n in answers.items() if k.endswith(":payment_pages_paced")),
        "gateway_unavailable": sum(n for k, n in answers.items() if k.endswith(":gateway_unavailable")),
        "fake_answered_429": run.fake.answered_429,
        "fake_429_by_endpoint": dict(sorted(refused.items())),
        "buyers_saw_429": sum(n for k, n in answers.items() if k.split(":")[1] == "429"),
        "server_errors": {
            k: n
            for k, n in answers.items()
            if k.split(":")[1] == "0"
            or (int(k.split(":")[1]) >= 500 and not any(k.endswith(":" + code) for code in HONEST_503))
        },
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m devtools.paced_sale")
    parser.add_argument("--units", type=int, default=300, help="units of the flash product, and as many buyers")
    parser.add_argument("--rate", type=int, default=8, help="PAYMENT_SESSIONS_PER_SECOND (0: not paced)")
    parser.add_argument(
        "--admit-per-second", type=int, default=None, help="the queue's pace (default: --rate, or 10 when it is 0)"
    )
    parser.add_argument("--workers", type=int, default=2, help="gunicorn worker processes (at least 2)")
    parser.add_argument("--reservation-ttl", type=int, default=300, help="RESERVATION_TTL_SECONDS")
    parser.add_argument(
        "--jitter", type=float, default=0.0, help="seconds a buyer adds at random to each wait (default 0)"
    )
    parser.add_argument(
        "--header-only",
        action="store_true",
        help="buyers obey Retry-After alone (whole seconds), not the page's turn_in_ms",
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--database-url", default="", help=f"default: a database of its own ({DATABASE})")
    args = parser.parse_args(argv)
    if args.admit_per_second is None:
        args.admit_per_second = args.rate or UNPACED_QUEUE_PACE
    if args.workers < 2:
        parser.error("--workers must be at least 2: the pace is shared across processes")
    if args.reservation_ttl < MARGIN_SECONDS + 60:
        parser.error(f"--reservation-ttl must leave Xendit's margin and its shortest page: {MARGIN_SECONDS + 60}")
    return args


def print_report(args: argparse.Namespace, report: dict[str, Any]) -> None:
    paced = f"{args.rate} pages/s" if args.rate else "not paced"
    rows = [
        ("sessions created at the fake", report["sessions_created"]),
        ("  most in any 1 s window (limit 10)", report["max_sessions_in_any_second"]),
        ("  most asked for in any 1 s window", report["max_creates_asked_in_any_second"]),
        (
            "  mean rate while creating (/s)",
            f"{report['mean_sessions_per_second']} over {report['creating_seconds']} s",
        ),
        (
            "checkout -> page wait p50/p99/max (s)",
            f"{report['page_wait_p50']} / {report['page_wait_p99']} / {report['page_wait_max']}",
        ),
        ("503 payment_pages_paced", report["payment_pages_paced"]),
        ("503 gateway_unavailable", report["gateway_unavailable"]),
        ("429s answered by the fake", f"{report['fake_answered_429']} {report['fake_429_by_endpoint']}"),
        ("429s seen by buyers", report["buyers_saw_429"]),
        ("pages before deadline - margin", f"{report['pages_before_deadline']} / {report['orders']} orders"),
        ("  least headroom (s)", report["least_seconds_left"]),
        ("orders paid", f"{report['paid']} / {args.units}"),
        ("audit_inventory clean", report["audit_clean"]),
        ("reconcile_payments clean", report["reconcile_clean"]),
        ("  seconds, at the fake's limit", report["reconcile_seconds"]),
        ("  429s it met (asked again after the wait)", report["reconcile_429s"]),
        ("5xx but honest 503s, or no answer", report["server_errors"] or 0),
    ]
    print(
        f"\n=== make paced-sale: {args.units} units, {paced}, queue at {args.admit_per_second}/s, {args.workers} web processes, buyers return {'after Retry-After' if args.header_only else 'at turn_in_ms'} + jitter {args.jitter} s ==="
    )
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")


def main(argv: list[str] | None = None) -> int:
    return rehearse(argv)[0]


def rehearse(argv: list[str] | None = None) -> tuple[int, dict[str, Any]]:
    """The rehearsal: (exit code, the report; its ``failures`` lists the failed checks)."""
    args = parse_args(argv)
    own_database = not args.database_url
    url = args.database_url or server_url(DATABASE)
    if own_database:
        database_ready(url)
    RESULTS.mkdir(exist_ok=True)
    fake = CountingFakeXendit(limit_per_second=XENDIT_LIMIT_PER_SECOND)
    with fake:
        run = Run(args, url, fake, random.Random(args.seed))
        env = {
            "PAYMENT_GATEWAY": "xendit",
            "XENDIT_SECRET_KEY": fake.secret_key,
            "XENDIT_CALLBACK_TOKEN": fake.callback_token,
            "XENDIT_API_BASE_URL": fake.base_url,
            "XENDIT_EXPIRY_MARGIN_SECONDS": str(MARGIN_SECONDS),
            "PAYMENT_SESSIONS_PER_SECOND": str(args.rate),
            "RESERVATION_TTL_SECONDS": str(args.reservation_ttl),
            "MAX_PENDING_ORDERS_PER_CUSTOMER": "0",
            "ACCESS_LOG": "false",
        }
        [(since,)] = query(url, "SELECT now()::text")
        # The setup runs with the shop's settings: a queue's pace above the page rate is refused there too.
        setup = manage(
            url,
            "flash_sale_setup",
            "--stock",
            str(args.units),
            "--queue",
            "--admit-per-second",
            str(args.admit_per_second),
            extra_env=env,
        )
        if "max_order_id=" not in setup.stdout:
            raise SystemExit("flash_sale_setup printed no max_order_id")
        tokens_file = RESULTS / "paced-tokens.json"
        ctl(url, "tokens", str(args.units), CUSTOMER_PREFIX, str(tokens_file))
        tokens = json.loads(tokens_file.read_text())
        web = Gunicorn(url, workers=args.workers, extra_env=env).start()
        run.base = web.base
        sweeper = Sweepers(url, 1, name="paced", **env).start()
        logged: list[str] = []
        try:
            log(f"sale: {args.units} buyers join the queue on {run.base}; the Xendit fake at {fake.base_url}")
            with concurrent.futures.ThreadPoolExecutor(args.units) as pool:
                for future in [pool.submit(buyer, run, i, token) for i, token in enumerate(tokens)]:
                    future.result()
            log("every buyer is done")
        finally:
            sweeper.stop()
            web.stop()
            # A 503 is an honest answer (logged by Django as an error); a 500 or a traceback is a bug.
            logged = [line for line in web.errors_in_log() if '"status_code": 503' not in line]
        report = measure(run)
        report.update(prove(run, since, env))
    if report["buyers_saw_429"]:
        run.fail(f"buyers saw {report['buyers_saw_429']} 429s: the shop passed the gateway's refusal on")
    if report["server_errors"] or logged:
        run.fail(f"the shop answered 5xx (other than honest 503s) or nothing: {report['server_errors']} {logged[:3]}")
    if args.rate:  # paced: the gateway never had to refuse a page
        if report["fake_429_by_endpoint"].get("create"):
            run.fail(f"paced at {args.rate}/s, the fake refused {report['fake_429_by_endpoint']['create']} creates")
        if report["max_creates_asked_in_any_second"] > XENDIT_LIMIT_PER_SECOND:
            run.fail(f"{report['max_creates_asked_in_any_second']} creates asked for in one second")
    report["failures"] = list(run.failures)
    print_report(args, report)
    if run.failures:
        print("make paced-sale: FAILED\n  " + "\n  ".join(run.failures[:30]))
        return 1, report
    print("make paced-sale: passed (every page opened in time within the gateway's limit, every order paid)")
    return 0, report


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.exit(main())
