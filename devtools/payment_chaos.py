"""``make payment-chaos``: a flash sale paid through the Midtrans fake while the gateway misbehaves, and the proof that
every order ends right.

The shop runs as production serves it (gunicorn, a looping sweeper) with ``PAYMENT_GATEWAY=midtrans`` pointed at
the fake (``devtools/fake_midtrans.py``), which injects faults on every endpoint: latency, answers slower than the
shop's deadline (time-outs), 5xx, and a stall of the whole gateway for a few seconds. --orders buyers each check out
one unit of the flash product (stock = --orders) and open their payment page (obeying ``Retry-After``); most pay on
the page, some abandon it, some cancel. Every payment's notification is delivered by one of five kinds: on time,
twice at once (duplicate), after an older ``pending`` notification (out of order), after the deadline (late), or
never (lost: the sweeper must find the money). Settled money for transactions the shop never issued (another shop's
ids under our order ids) is notified too (foreign). The web tier is restarted once, mid-sale. Then the deadlines
pass (the pending orders' deadlines are moved into the past: the database clock is the only clock), the late
notifications arrive, and the sweeper expires the rest.

The proof, on the database and the fake's books: every order is paid exactly once (one succeeded attempt, whose
charge is a settlement of one of the order's own transactions) or cancelled; every other settlement of an order's
transactions is flagged ``refund_required``; money for a foreign id is an unmatched payment and paid nothing; no
order is left pending; ``audit_inventory`` clean; ``reconcile_payments`` reports exactly the flagged refunds and the
unmatched payments, nothing else; the shop answered no request with a 500. Prints the counts of what was injected and
how every order ended; exit code 1 on any failure.

    python -m devtools.payment_chaos                  # 200 orders against the development database
    python -m devtools.payment_chaos --orders 30      # the size make test runs (payments/tests/test_payment_chaos.py)
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import re
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from devtools.fake_midtrans import FakeMidtrans
from devtools.processes import RESULTS, Gunicorn, Sweepers, ctl, flash_sale_setup, log, manage, query, server_url

FLASH_PRODUCT = 101
CUSTOMER_PREFIX = "chaos"
NOTIFICATION_PATH = "/v1/payments/midtrans/notification"
KINDS = ("on_time", "duplicate", "out_of_order", "late", "lost", "on_time")


@dataclass
class Run:
    args: argparse.Namespace
    url: str
    fake: FakeMidtrans
    rng: random.Random
    base: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)
    injected: Counter[str] = field(default_factory=Counter)  # gateway faults and notification kinds
    buyers: Counter[str] = field(default_factory=Counter)  # what each buyer did
    answers: Counter[str] = field(default_factory=Counter)  # "<kind>:<status>" of every request to the shop
    late: list[str] = field(default_factory=list)  # gateway ids whose notification waits for the deadline
    retry_later: list[str] = field(default_factory=list)  # notifications the shop did not accept during the storm
    foreign: list[str] = field(default_factory=list)  # settled ids the shop never issued
    failures: list[str] = field(default_factory=list)
    stalled_until: float = 0.0
    paid: int = 0  # payments notified so far
    calls: int = 0  # calls the gateway received so far
    started: int = field(default_factory=time.time_ns)

    def count(self, counter: Counter[str], key: str) -> None:
        with self.lock:
            counter[key] += 1


def request(
    run: Run,
    kind: str,
    method: str,
    path: str,
    *,
    token: str = "",
    body: Any = None,
    key: str = "",
    raw: bytes | None = None,
) -> tuple[int, dict[str, str], Any]:
    """One request to the shop (to whichever web tier serves now); (status, headers, JSON body). No answer is 0."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if key:
        headers["Idempotency-Key"] = key
    req = urllib.request.Request(run.base + path, data=data, method=method, headers=headers)
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(req, timeout=30) as resp:
            status, answer_headers, raw_body = resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        status, answer_headers, raw_body = exc.code, dict(exc.headers), exc.read()
    except OSError:
        status, answer_headers, raw_body = 0, {}, b""
    try:
        payload = json.loads(raw_body) if raw_body else None
    except ValueError:
        payload = None
    code = payload.get("code") if isinstance(payload, dict) and 400 <= status < 500 else None
    if kind == "notification" and isinstance(payload, dict) and status == 200:
        code = payload.get("status")
    run.count(run.answers, f"{kind}:{status}" + (f":{code}" if code else ""))
    return status, answer_headers, payload


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def retry_wait(headers: dict[str, str]) -> float:
    """A buyer obeys Retry-After, compressed tenfold (the run's clock is short), at most a second."""
    try:
        return min(1.0, int(headers.get("Retry-After", "1")) / 10)
    except ValueError:
        return 0.5


def gateway_chaos(run: Run) -> Any:
    def fault(endpoint: str) -> object:
        now = time.monotonic()
        if now < run.stalled_until:
            run.count(run.injected, "gateway_stall")
            return ("wait", run.args.deadline * 1.5)
        with run.lock:
            run.calls += 1
            n = run.calls
        if n % 20 == 7:  # one call in twenty answers 500, another times out
            run.count(run.injected, "gateway_5xx")
            return "500"
        if n % 20 == 17:
            run.count(run.injected, "gateway_timeout")
            return ("wait", run.args.deadline * 1.5)
        if run.rng.random() < 0.2:
            run.count(run.injected, "gateway_latency")
            return ("wait", run.rng.uniform(0.02, 0.2))
        return None

    return fault


def deliver(run: Run, gateway_order_id: str, *, attempts: int = 12, final: bool = False) -> None:
    """Midtrans's delivery of the transaction's current state: retried on anything but a 2xx."""
    body = run.fake.notification(gateway_order_id=gateway_order_id)
    for _ in range(attempts):
        status, headers, _answer = request(run, "notification", "POST", NOTIFICATION_PATH, raw=body)
        if 200 <= status < 300:
            return
        time.sleep(retry_wait(headers))  # pacing: the gateway's retry schedule, compressed
    if final:
        run.failures.append(f"the notification of {gateway_order_id} was never accepted by a healthy shop")
    else:
        with run.lock:
            run.retry_later.append(gateway_order_id)  # Midtrans retries for hours: again once the storm is over


def notify(run: Run, gateway_order_id: str) -> None:
    with run.lock:  # every kind in turn, so that a small run injects each of them
        kind = KINDS[run.paid % len(KINDS)]
        run.paid += 1
    run.count(run.injected, f"notification_{kind}")
    if kind == "lost":
        return
    if kind == "late":
        with run.lock:
            run.late.append(gateway_order_id)
        return
    if kind == "out_of_order":  # an older state's notification arrives after the newer one
        deliver(run, gateway_order_id)
        with run.fake._lock:
            record = run.fake.transactions[gateway_order_id]
            older = dict(record, transaction_status="pending", status_code="201")
            run.fake.transactions[gateway_order_id] = older
            stale = run.fake.notification(gateway_order_id=gateway_order_id)
            run.fake.transactions[gateway_order_id] = record
        request(run, "notification", "POST", NOTIFICATION_PATH, raw=stale)
        return
    if kind == "duplicate":
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda _: deliver(run, gateway_order_id), range(2)))
        return
    deliver(run, gateway_order_id)


def pay_on_the_page(run: Run, gateway_order_id: str, total: str) -> bool:
    """The buyer pays on the Snap page: only a transaction still open at the gateway takes money."""
    with run.fake._lock:
        record = run.fake.transactions.get(gateway_order_id)
        if record is not None and record["transaction_status"] != "pending":
            return False
    run.fake.pay(gateway_order_id=gateway_order_id, gross_amount=total)
    return True


def buyer(run: Run, i: int, token: str) -> None:
    key = f"chaos-{run.args.seed}-{run.started}-{i}"  # the customers are reused by the next run; their keys not
    for _ in range(20):
        status, headers, order = request(
            run,
            "checkout",
            "POST",
            "/v1/checkout",
            token=token,
            key=key,
            body={"items": [{"product_id": FLASH_PRODUCT, "qty": 1}]},
        )
        if status in (200, 201):
            break
        if status == 409:
            run.count(run.buyers, "sold_out")
            return
        time.sleep(retry_wait(headers))  # pacing: a retry after the front or a restart refused it
    else:
        run.failures.append(f"buyer {i}: no checkout answer")
        return
    order_id, link = order["order_id"], urlsplit(order["payment_url"]).path
    for _ in range(25):
        status, headers, _answer = request(run, "payment_page", "GET", link)
        if status == 302:
            break
        if status == 409:  # paid meanwhile by an earlier attempt, or the window closed
            return
        time.sleep(retry_wait(headers))  # pacing: the page is retried as its Retry-After says
    else:
        run.count(run.buyers, "no_page")
        return
    token_of_page = headers["Location"].rsplit("/", 1)[-1]
    gateway_order_id = run.fake.snap_tokens[token_of_page]
    action = run.rng.choices(("pay", "abandon", "cancel"), weights=(70, 20, 10))[0]
    run.count(run.buyers, action)
    if action == "cancel":
        request(run, "cancel", "POST", f"/v1/orders/{order_id}/cancel", token=token)
        if run.rng.random() < 0.5 and pay_on_the_page(run, gateway_order_id, order["total"]):
            run.count(run.buyers, "paid_after_cancel")  # the page should be closed: the gateway refuses
            notify(run, gateway_order_id)
        return
    if action == "abandon":
        if len(run.foreign) < run.args.foreign:  # another shop's money under this order's id
            foreign = f"{order_id}-f0re1gn{i}"
            run.fake.pay(gateway_order_id=foreign, gross_amount=order["total"])
            with run.lock:
                run.foreign.append(foreign)
            run.count(run.injected, "notification_foreign")
            deliver(run, foreign)
        return
    if pay_on_the_page(run, gateway_order_id, order["total"]):
        notify(run, gateway_order_id)


def sale(run: Run, tokens: list[str], stack: dict[str, Any]) -> None:
    with concurrent.futures.ThreadPoolExecutor(run.args.concurrency) as pool:
        futures = [pool.submit(buyer, run, i, token) for i, token in enumerate(tokens)]
        restarted = stalled = False
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            future.result()
            if not stalled and done >= len(futures) // 4:
                stalled = True
                run.stalled_until = time.monotonic() + run.args.stall
                log(f"the gateway stalls for {run.args.stall}s")
            if not restarted and done >= len(futures) // 2:
                restarted = True
                new = Gunicorn(run.url, workers=run.args.workers, extra_env=stack["env"]).start()
                old, stack["web"], run.base = stack["web"], new, new.base
                old.stop()  # graceful: its requests in flight finish
                log(f"web tier restarted: {old.base} -> {new.base}")


def deadlines_pass(run: Run) -> None:
    """Every pending order's deadline moves into the past (the database clock decides expiry)."""
    query(
        run.url,
        "WITH o AS (UPDATE orders SET payment_expires_at = now() - interval '1 second' "
        "WHERE status = 'pending_payment' RETURNING id) "
        "UPDATE inventory_reservations SET expires_at = now() - interval '1 second' "
        "WHERE status = 'active' AND order_id IN (SELECT id FROM o) RETURNING 1",
    )


def wait_until_settled(run: Run, timeout: float = 120) -> None:
    stop = time.monotonic() + timeout
    while time.monotonic() < stop:
        [(pending,)] = query(run.url, "SELECT count(*) FROM orders WHERE status = 'pending_payment'")
        if pending == 0:
            return
        time.sleep(0.5)  # pacing: the looping sweeper's interval
    run.failures.append("orders were still pending long after their deadline")


def prove(run: Run, since: str) -> dict[str, int]:
    env = {
        "PAYMENT_GATEWAY": "midtrans",
        "MIDTRANS_SNAP_BASE_URL": run.fake.base_url,
        "MIDTRANS_API_BASE_URL": run.fake.base_url,
        "MIDTRANS_SERVER_KEY": run.fake.server_key,
    }
    reconcile = manage(run.url, "reconcile_payments", "--since", since, check=False, quiet=True, extra_env=env)
    lines = reconcile.stdout.strip().splitlines()
    refund_lines = [line for line in lines if re.match(r"order \d+: refund_to_make: ", line)]
    unmatched_lines = [line for line in lines if line.startswith("unmatched payment: ")]
    other = [line for line in lines[:-1] if line not in refund_lines and line not in unmatched_lines]
    if other or len(unmatched_lines) != len(run.foreign):
        run.failures.append(f"reconcile_payments reported more than refunds and the foreign money: {other}")
    named_by_reconcile = {m.group(1) for line in refund_lines if (m := re.search(r"transaction (\S+)\)$", line))}
    orders = query(
        run.url,
        "SELECT o.id, o.status, ARRAY(SELECT t.gateway_order_id FROM gateway_transactions t WHERE t.order_id = o.id), "
        "ARRAY(SELECT a.provider_reference FROM payment_attempts a WHERE a.order_id = o.id AND a.status = 'succeeded'), "
        "ARRAY(SELECT a.provider_reference FROM payment_attempts a WHERE a.order_id = o.id "
        "      AND a.status = 'refund_required'), "
        "COALESCE((SELECT s.needs_reconciliation FROM payment_sessions s WHERE s.order_id = o.id), false) "
        f"FROM orders o JOIN auth_user u ON u.id = o.customer_id WHERE u.username LIKE '{CUSTOMER_PREFIX}-%' "
        f"AND o.created_at >= '{since}'",
    )
    created = sum(n for key, n in run.answers.items() if key.startswith("checkout:201"))
    if len(orders) != created or not created:
        run.failures.append(f"the proof found {len(orders)} orders of this run, the buyers were answered {created}")
    books = dict(run.fake.transactions)
    outcomes: Counter[str] = Counter()
    extra_charges = 0
    for order_id, status, gids, succeeded, refunds, marked in orders:
        settled = {
            books[g]["transaction_id"]: g for g in gids if books.get(g, {}).get("transaction_status") == "settlement"
        }
        if status == "paid":
            if len(succeeded) != 1 or succeeded[0] not in settled:
                run.failures.append(f"order {order_id} paid by {succeeded}, its own settlements {sorted(settled)}")
                continue
            extra = {t: g for t, g in settled.items() if t != succeeded[0]}
        elif status == "cancelled":
            if succeeded:
                run.failures.append(f"cancelled order {order_id} has a succeeded payment {succeeded}")
            extra = settled
        else:
            run.failures.append(f"order {order_id} ended {status}")
            continue
        # Every other charge is flagged for a refund: a refund_required attempt holds it, or the sweeper marked the
        # order (expired without the gateway's word), and reconcile_payments names it as a refund to make.
        for charge, gid in extra.items():
            if gid not in named_by_reconcile:
                run.failures.append(f"order {order_id} ({status}): reconcile_payments does not name charge {charge}")
            how = "attempt" if charge in refunds else "marked" if marked else "reconcile_only"
            outcomes[f"refund_found_by_{how}"] += 1
        extra_charges += len(extra)
        outcomes[status] += 1
    if len(refund_lines) != extra_charges:
        run.failures.append(f"reconcile_payments named {len(refund_lines)} refunds, the books hold {extra_charges}")
    unmatched = {
        row[0]
        for row in query(run.url, f"SELECT gateway_order_id FROM unmatched_payments WHERE received_at >= '{since}'")
    }
    if unmatched != set(run.foreign):
        run.failures.append(f"unmatched payments {sorted(unmatched)}, foreign money sent {sorted(run.foreign)}")
    audit = manage(run.url, "audit_inventory", check=False, quiet=True)
    if audit.returncode != 0:
        run.failures.append("audit_inventory: " + (audit.stdout + audit.stderr).strip()[-400:])
    outcomes["unmatched_payments"] = len(unmatched)
    return dict(outcomes)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m devtools.payment_chaos")
    parser.add_argument("--orders", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--deadline", type=float, default=1.0, help="MIDTRANS_TIMEOUT_SECONDS")
    parser.add_argument("--stall", type=float, default=3.0, help="seconds the whole gateway stalls, once")
    parser.add_argument("--foreign", type=int, default=3, help="notifications of transactions the shop never issued")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--database-url", default="", help="default: the development database (make run's)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.database_url = args.database_url or server_url("skincare")
    RESULTS.mkdir(exist_ok=True)
    with FakeMidtrans() as fake:
        run = Run(args, args.database_url, fake, random.Random(args.seed))
        fake.chaos = gateway_chaos(run)
        [(since,)] = query(run.url, "SELECT now()::text")
        # An earlier run's foreign money was its own injection: resolved, so that this run's reconciliation lists
        # exactly this run's.
        query(
            run.url,
            "UPDATE unmatched_payments SET resolved_at = now(), resolved_by = 'payment-chaos' "
            "WHERE gateway_order_id LIKE '%-f0re1gn%' AND resolved_at IS NULL RETURNING 1",
        )
        flash_sale_setup(run.url, args.orders)
        tokens_file = RESULTS / "chaos-tokens.json"
        ctl(run.url, "tokens", str(args.orders), CUSTOMER_PREFIX, str(tokens_file))
        tokens = json.loads(tokens_file.read_text())
        env = {
            "PAYMENT_GATEWAY": "midtrans",
            "MIDTRANS_SERVER_KEY": fake.server_key,
            "MIDTRANS_SNAP_BASE_URL": fake.base_url,
            "MIDTRANS_API_BASE_URL": fake.base_url,
            "MIDTRANS_TIMEOUT_SECONDS": str(int(args.deadline)),
            "MIDTRANS_EXPIRY_MARGIN_SECONDS": "60",
            "PAYMENT_SESSIONS_PER_SECOND": "0",  # the fake has no rate limit: the faults, not the pace, are rehearsed
            "GATEWAY_BREAKER_FAILURES": "3",
            "GATEWAY_BREAKER_SECONDS": "2",
            "RESERVATION_TTL_SECONDS": "900",
            "MAX_PENDING_ORDERS_PER_CUSTOMER": "0",
            "ACCESS_LOG": "false",
        }
        stack: dict[str, Any] = {"env": env}
        stack["web"] = Gunicorn(run.url, workers=args.workers, extra_env=env).start()
        run.base = stack["web"].base
        sweeper = Sweepers(run.url, 1, name="chaos", **env).start()
        errors: list[str] = []
        try:
            log(f"sale: {args.orders} buyers on {run.base}, the Midtrans fake at {fake.base_url} misbehaving")
            sale(run, tokens, stack)
            log(f"deadlines pass; {len(run.late)} late notifications arrive")
            deadlines_pass(run)
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda gid: deliver(run, gid), run.late))
            wait_until_settled(run)
            fake.chaos = None  # the storm is over: Midtrans's later retries reach a healthy gateway
            log(f"the gateway is healthy again; {len(run.retry_later)} notifications retried")
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda gid: deliver(run, gid, final=True), sorted(set(run.retry_later))))
        finally:
            sweeper.stop()
            stack["web"].stop()
            # A 503 is an honest answer (logged by Django as an error); a 500 or a traceback is a bug.
            errors = [e for e in stack["web"].errors_in_log() if '"status_code": 503' not in e]
        fake.chaos = None
        outcomes = prove(run, since)
    server_errors = {k: v for k, v in run.answers.items() if k.endswith(":500")}
    if server_errors or errors:
        run.failures.append(f"the shop answered 500: {server_errors} {errors[:3]}")
    print("\n=== make payment-chaos ===")
    print(f"orders: {args.orders} buyers; did: {dict(sorted(run.buyers.items()))}")
    print(f"injected: {dict(sorted(run.injected.items()))}")
    print(f"outcomes: {dict(sorted(outcomes.items()))}")
    print(f"answers: {dict(sorted(run.answers.items()))}")
    if run.failures:
        print("make payment-chaos: FAILED\n  " + "\n  ".join(run.failures[:30]))
        return 1
    print("make payment-chaos: passed (every order paid exactly once or cancelled, every other charge flagged)")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.exit(main())
