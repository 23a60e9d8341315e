"""Locust swarm checks for the flash-sale checkout (``make loadtest`` drives it; see docs/benchmarks.md).

User classes:

* ``FlashSaleBuyer`` - each user sends exactly ONE checkout for product 101. With ``FLASH_SALE_BURST=N`` the
  first N users wait for each other and fire together (a gevent barrier), and the run quits once all N have
  their answer. 201 and 409 ``stock_conflict`` are both expected; they are counted separately.
* ``Shopper`` - browses, checks out random products 102-108, pays through a signed webhook (or cancels, or
  abandons the order), and reads the order back.
* ``WebhookReplayer`` - re-delivers events that were already applied; each must answer 200 ``duplicate``.
* ``OpeningBuyer`` - the opening of a sale window: polls product 101, counts down from its ``seconds_to_start``,
  fires one checkout at the opening (again after a ``409 sale_not_started``), and the run quits once all
  ``OPENING_BUYERS`` have a final answer; reports p50/p99 of the opening second and the buyers answered within 1 s.
* ``QueueBuyer`` - the waiting room (docs/queue.md): joins product 101's queue, polls its pass after each
  ``poll_after``, checks out once admitted and pays; the run quits once all ``QUEUE_BUYERS`` have a final state
  (bought or sold_out); reports admitted checkouts' p50/p99, polls' p99 and rate, and when the sale sold out.
* ``CartShopper`` - builds a cart of products 102-108 (``POST /v1/carts``), reads and edits it, waits, and checks it
  out with an ``Idempotency-Key`` (201, or 409 ``stock_conflict``), then presses pay again: that must answer 409
  ``cart_checked_out`` naming the same order. When the carts expire quickly (CART_TTL_SECONDS at most 30, as in
  ``make loadtest``), a quarter of them wait past the expiry first: their checkout must answer 410
  ``cart_expired`` and change nothing, and they rebuild the cart.

A 503 with ``Retry-After`` (the front's when a request could not start within its queue bound, ``X-Shed-By: front``;
the application's ``busy`` when a lock could not be had in time) is an honest answer: the buyer waits what
``Retry-After`` says (plus up to half as much again, so that the shed crowd does not come back in one instant) and
sends again, at most ``RETRIES_AFTER_503`` times, then gives up (counted as such). Any other 5xx or unexpected
status is a failure, and so is a request the service never answered within ``CLIENT_TIMEOUT_SECONDS`` (status 0).
When Locust quits, the invariants are checked: ``manage.py audit_inventory`` and "units held by orders for product
101 since the flash-sale setup <= the flash-sale stock"; any violation or any failure sets the exit code to 1.

Environment (all optional):
  LOADTEST_TOKENS_FILE       JSON list of customer tokens, one per user (from ``issue_token``; bench/loadtest.py
                             writes it). Without it every user shares LOADTEST_TOKEN (default: the demo token).
  PAYMENT_WEBHOOK_SECRET     the server's webhook secret (default: the demo secret that `make run` writes to .env).
  FLASH_SALE_STOCK           the flash-sale stock (default 1).
  FLASH_SALE_SINCE_ORDER_ID  highest order id right after ``flash_sale_setup``; when unset, this file runs
                             ``manage.py flash_sale_setup --stock FLASH_SALE_STOCK`` itself at test start.
  FLASH_SALE_BURST           number of FlashSaleBuyers released together, then quit (0: no barrier, no quit).
  OPENING_BUYERS             number of OpeningBuyers (the run quits when all have a final answer).
  OPENING_POLL_SECONDS       how often an OpeningBuyer polls the product before the last stretch (default 2).
  QUEUE_BUYERS               number of QueueBuyers (the run quits when all have a final state).
  QUEUE_JOIN_SPREAD_SECONDS  QueueBuyers join at a random moment of the first this-many seconds (default 0).
  QUEUE_OPENS_AT_EPOCH       the sale's opening (Unix seconds) the queue report counts from.
  LOADTEST_SUMMARY           path of a JSON file to write the counters and check results to.
  DATABASE_URL               the database the server uses (for the checks; default: the embedded dev database).
  CART_TTL_SECONDS           the server's cart lifetime (default 1800); at most 30 turns on the late CartShoppers.
"""

import collections
import contextlib
import json
import os
import random
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path

import gevent
from gevent.event import Event
from locust import FastHttpUser, between, constant, events, task
from locust.exception import StopUser
from locust.runners import WorkerRunner

from payments.signing import sign
from skincare import demo

ROOT = Path(__file__).resolve().parent
FLASH_PRODUCT = 101
SHOP_PRODUCTS = list(range(102, 109))
SECRET = os.environ.get("PAYMENT_WEBHOOK_SECRET") or demo.DEMO_WEBHOOK_SECRET
FLASH_SALE_STOCK = int(os.environ.get("FLASH_SALE_STOCK", "1"))
BURST = int(os.environ.get("FLASH_SALE_BURST", "0"))
CART_TTL_SECONDS = int(os.environ.get("CART_TTL_SECONDS", "1800"))
LATE_CART_SHARE = 0.25 if CART_TTL_SECONDS <= 30 else 0.0


def _load_tokens():
    path = os.environ.get("LOADTEST_TOKENS_FILE")
    if path:
        tokens = json.loads(Path(path).read_text())
        if tokens:
            return tokens, False
    return [os.environ.get("LOADTEST_TOKEN", demo.DEMO_CUSTOMER_TOKEN)], True


TOKENS, SHARED_TOKEN = _load_tokens()
_token_lock = threading.Lock()
_token_index = 0


def next_token():
    global _token_index
    with _token_lock:
        token = TOKENS[_token_index % len(TOKENS)]
        _token_index += 1
    return token


# Custom counters: {"checkout 101": {201: n, 409: n, ...}, "webhook": {...}, ...}; merged from workers if distributed.
COUNTS = collections.defaultdict(collections.Counter)
SENT_EVENTS = collections.deque(maxlen=2000)  # (raw body, original signature header, signed at)
STATE = {"since_order_id": os.environ.get("FLASH_SALE_SINCE_ORDER_ID"), "setup_output": ""}

_burst_ready = Event()
_burst_joined = 0
_burst_done = 0


# A buyer sends a request again after a 503 with Retry-After at most this many times, then gives up honestly.
RETRIES_AFTER_503 = 10
# Longer than anything the service may take to answer (the front's queue bound, then at most gunicorn's 30 s worker
# timeout): a request not answered within it is one the service never answered, counted under status 0.
CLIENT_TIMEOUT_SECONDS = 60
# Each honest 503's (sent, answered), by who answered: "front" (X-Shed-By: front) or "app" (Django's).
SHED = {"front": [], "app": []}
HONEST_503 = ("503 front", "503 app")
GAVE_UP = "gave up after 503s"


def count(key, code):
    COUNTS[key][str(code)] += 1


def expect(resp, key, ok_statuses):
    """Count the status under ``key``; mark the request a success only for ``ok_statuses``."""
    count(key, resp.status_code)
    if resp.status_code in ok_statuses:
        resp.success()
        return True
    body = (resp.text or "")[:200] if resp.status_code else str(resp.error)
    resp.failure(f"unexpected {resp.status_code}: {body}")
    return False


def shed_wait(resp, key, sent):
    """A 503 with Retry-After: counted under ``key`` by who answered, its latency kept, marked a success (the buyer
    retries); the seconds to wait before sending again. None for any other answer."""
    if resp.status_code != 503 or not (resp.headers.get("Retry-After") or "").isdigit():
        return None
    source = "front" if resp.headers.get("X-Shed-By") == "front" else "app"
    SHED[source].append((sent, time.time()))
    count(key, f"503 {source}")
    resp.success()
    return int(resp.headers["Retry-After"]) * random.uniform(1.0, 1.5)


@contextlib.contextmanager
def obeying_retry_after(client, method, path, *, key, **kwargs):
    """One request as a real client sends it (a context manager like ``catch_response``): a 503 with Retry-After is
    waited out and sent again, at most RETRIES_AFTER_503 times; yields the final answer and when it was sent
    (``time.time()``), or None and the last 503's sending time when it gave up."""
    for attempt in range(RETRIES_AFTER_503 + 1):
        sent = time.time()
        with client.request(method, path, catch_response=True, **kwargs) as resp:
            wait = shed_wait(resp, key, sent)
            if wait is None:
                yield resp, sent
                return
        if attempt < RETRIES_AFTER_503:
            gevent.sleep(wait)
    count(key, GAVE_UP)
    yield None, sent


class CustomerUser(FastHttpUser):
    abstract = True
    network_timeout = connection_timeout = CLIENT_TIMEOUT_SECONDS

    def on_start(self):
        self.token = next_token()
        self.auth = {"Authorization": f"Bearer {self.token}"}

    def checkout(self, items, *, key, name):
        with obeying_retry_after(
            self.client, "POST", "/v1/checkout", key=key, json={"items": items}, headers=self.auth, name=name
        ) as (resp, _sent):
            if resp is None:
                return None
            ok = expect(resp, key, (201, 409))
            if ok and resp.status_code == 409 and (resp.json() or {}).get("code") != "stock_conflict":
                resp.failure(f"409 without code stock_conflict: {resp.text[:200]}")
                return None
            return resp.json() if ok and resp.status_code == 201 else None

    def pay(self, order_id, total):
        event = {
            "event_id": f"evt_{uuid.uuid4().hex}",
            "type": "payment.succeeded",
            "order_id": order_id,
            "amount": total,
            "currency": "IDR",  # the shop's (SHOP_CURRENCY's default)
            "provider_reference": f"ch_{uuid.uuid4().hex[:16]}",
        }
        body = json.dumps(event).encode()
        header = sign(body=body, secret=SECRET)
        with obeying_retry_after(  # a gateway retries a delivery the shop could not take
            self.client,
            "POST",
            "/v1/payments/webhook",
            key="webhook",
            data=body,
            headers={"Content-Type": "application/json", "X-Signature": header},
            name="POST /v1/payments/webhook",
        ) as (resp, _sent):
            if resp is not None and expect(resp, "webhook", (200,)):
                outcome = resp.json().get("status")
                count("webhook outcome", outcome)
                if outcome != "paid":
                    resp.failure(f"a fresh payment for a pending order answered {outcome!r}")
                else:
                    SENT_EVENTS.append((body, header, time.time()))


class FlashSaleBuyer(CustomerUser):
    """One checkout of product 101 per user, all released together when FLASH_SALE_BURST is set."""

    wait_time = constant(0)
    weight = 1

    @task
    def buy_once(self):
        global _burst_joined, _burst_done
        if BURST:
            _burst_joined += 1
            if _burst_joined >= BURST:
                _burst_ready.set()
            _burst_ready.wait(timeout=120)
        self.checkout(
            [{"product_id": FLASH_PRODUCT, "qty": 1}], key=f"checkout {FLASH_PRODUCT}", name="POST /v1/checkout [101]"
        )
        _burst_done += 1
        if BURST and _burst_done == BURST:
            gevent.spawn_later(0.1, self.environment.runner.quit)
        raise StopUser()


# The "opening" profile (docs/sale-windows.md): buyers poll the product, count down from the server's
# seconds_to_start (never their own clock), fire at the opening, and the run reports the opening second.
OPENING_BUYERS = int(os.environ.get("OPENING_BUYERS", "0"))
OPENING_POLL_SECONDS = float(os.environ.get("OPENING_POLL_SECONDS", "2"))
# Per checkout request: (sent at, answered at, status, code), on this machine's clock (time.time()); and each
# buyer's estimate of the opening on that clock (now + seconds_to_start at its last poll).
OPENING = {"requests": [], "estimates": [], "done": 0, "final": collections.Counter(), "starts_at": None}


class OpeningBuyer(CustomerUser):
    """Polls product 101 until its sale opens, fires one checkout at the opening, and stops with its final answer.
    A 409 ``sale_not_started`` (it fired a little early) polls again and fires at the new countdown."""

    wait_time = constant(0)
    weight = 1

    def poll(self):
        """The product, and when its answer was computed on this machine's clock (the middle of the round trip)."""
        with obeying_retry_after(
            self.client, "GET", f"/v1/products/{FLASH_PRODUCT}", key="poll 101", name="GET /v1/products/101 [poll]"
        ) as (resp, sent):
            if resp is None or not expect(resp, "poll 101", (200,)):
                return None, sent
            return resp.json(), (sent + time.time()) / 2

    def wait_for_opening(self):
        for _ in range(600):
            product, computed_at = self.poll()
            if product is None:
                gevent.sleep(OPENING_POLL_SECONDS)
                continue
            if product["sale"] != "scheduled":
                return
            OPENING["starts_at"] = product["sale_starts_at"]
            opens_at = computed_at + product["seconds_to_start"]
            OPENING["estimates"].append(opens_at)
            if opens_at - time.time() <= OPENING_POLL_SECONDS:
                gevent.sleep(max(opens_at - time.time(), 0))
                return
            gevent.sleep(OPENING_POLL_SECONDS * random.uniform(0.8, 1.0))

    @task
    def buy_at_opening(self):
        for _ in range(20):
            self.wait_for_opening()
            with obeying_retry_after(
                self.client,
                "POST",
                "/v1/checkout",
                key="checkout opening",
                json={"items": [{"product_id": FLASH_PRODUCT, "qty": 1}]},
                headers=self.auth,
                name="POST /v1/checkout [opening]",
            ) as (resp, sent):
                if resp is None:
                    code = GAVE_UP
                    break
                code = (resp.json() or {}).get("code") if resp.status_code in (409, 410) else None
                OPENING["requests"].append((sent, time.time(), resp.status_code, code))
                key = f"opening {resp.status_code} {code}" if code else f"opening {resp.status_code}"
                count("checkout opening", key.removeprefix("opening "))
                if resp.status_code == 201 or (
                    resp.status_code == 409 and code in ("stock_conflict", "sale_not_started")
                ):
                    resp.success()
                else:
                    resp.failure(f"unexpected {resp.status_code}: {(resp.text or '')[:200]}")
            if code != "sale_not_started":
                break
        OPENING["final"][
            GAVE_UP if resp is None else f"{resp.status_code} {code}" if code else str(resp.status_code)
        ] += 1
        OPENING["done"] += 1
        if OPENING["done"] == OPENING_BUYERS:
            gevent.spawn_later(0.1, self.environment.runner.quit)
        raise StopUser()


def opening_report():
    """p50/p99 of the checkouts sent in the opening second, and how many buyers had their final answer within 1 s
    of the opening. The opening is sale_starts_at as the product API gave it: the load test runs on the database's
    machine, so that clock and time.time() here are the same clock (the buyers themselves only use
    seconds_to_start). The spread of the buyers' own estimates of the opening is reported beside it."""
    if not OPENING["estimates"] or not OPENING["requests"] or OPENING["starts_at"] is None:
        return {}
    estimates = sorted(OPENING["estimates"])
    opening = datetime.fromisoformat(OPENING["starts_at"].replace("Z", "+00:00")).timestamp()
    # The opening second: checkouts sent within half a second either side of sale_starts_at (buyers' countdowns
    # land a little early or late; the database decides which of them were early).
    in_second = sorted(
        (answered - sent) * 1000 for sent, answered, _s, _c in OPENING["requests"] if abs(sent - opening) < 0.5
    )

    def pct(values, q):
        return round(values[min(len(values) - 1, int(q * len(values)))], 1) if values else None

    # One final answer per buyer: its last request (the ones before it were sale_not_started).
    finals = [answered for _sent, answered, _status, code in OPENING["requests"] if code != "sale_not_started"]
    return {
        "opening_buyers": OPENING_BUYERS,
        "opening_estimate_spread_ms": round((estimates[-1] - estimates[0]) * 1000, 1),
        "opening_estimate_median_error_ms": round((estimates[len(estimates) // 2] - opening) * 1000, 1),
        "opening_second_requests": len(in_second),
        "opening_second_p50_ms": pct(in_second, 0.5),
        "opening_second_p99_ms": pct(in_second, 0.99),
        "opening_sent_early": sum(1 for sent, _a, _s, _c in OPENING["requests"] if sent < opening),
        "opening_sale_not_started": sum(1 for *_x, code in OPENING["requests"] if code == "sale_not_started"),
        "answered_within_1s": sum(1 for answered in finals if answered < opening + 1),
        "last_answer_after_opening_ms": round((max(finals) - opening) * 1000, 1) if finals else None,
        "opening_finals": dict(OPENING["final"]),
        # every checkout of the crowd, whenever it was sent (the queue profile compares them with the admitted ones)
        "opening_checkout_p50_ms": pct(sorted((a - s) * 1000 for s, a, _st, _c in OPENING["requests"]), 0.5),
        "opening_checkout_p99_ms": pct(sorted((a - s) * 1000 for s, a, _st, _c in OPENING["requests"]), 0.99),
    }


# The "queue" profile (docs/queue.md): buyers join product 101's queue before the opening, poll their pass when
# its poll_after says, check out once admitted, pay, and stop at a final state (bought, sold_out, expired).
QUEUE_BUYERS = int(os.environ.get("QUEUE_BUYERS", "0"))
# polls: (sent, answered); checkouts: (sent, answered, status, code); first_sold_out: when a pass first said so.
QUEUE = {"polls": [], "checkouts": [], "joins": [], "done": 0, "final": collections.Counter(), "first_sold_out": None}


QUEUE_JOIN_SPREAD = float(os.environ.get("QUEUE_JOIN_SPREAD_SECONDS", "0"))


class QueueBuyer(CustomerUser):
    """Joins product 101's queue (one pass) at a random moment of the first QUEUE_JOIN_SPREAD_SECONDS, polls it after
    each ``poll_after``, checks out once ``admitted`` (and pays by signed webhook, so that a sold-out sale ends the
    queue), and stops at a final answer. Like a real client it retries a request that got no answer (a timeout or a
    refused connection on an overloaded machine, counted under status 0) after a short back-off, and obeys a 503's
    Retry-After (``obeying_retry_after``)."""

    wait_time = constant(0)
    weight = 1

    def queue_pass(self, method):
        """The join (POST) or a poll (GET of the join's ``poll_url`` with its signed pass in ``Queue-Pass``, which
        the server answers without the database while the pass waits); the answer, None after a refusal."""
        name = "POST /v1/products/101/queue" if method == "post" else "GET /v1/queue/passes/<id> [poll]"
        key = "queue join" if method == "post" else "queue poll"
        for attempt in range(8):
            if method == "post":
                path, headers = f"/v1/products/{FLASH_PRODUCT}/queue", self.auth
            else:
                path, headers = self.poll_url, {**self.auth, self.signed_pass[0]: self.signed_pass[1]}
            with obeying_retry_after(self.client, method.upper(), path, key=key, headers=headers, name=name) as (
                resp,
                sent,
            ):
                if resp is None:
                    return {"state": GAVE_UP}
                if resp.status_code == 0:  # no answer: counted, retried
                    count(key, 0)
                    resp.success()
                else:
                    ok = expect(resp, key, (200, 201))
                    (QUEUE["joins"] if method == "post" else QUEUE["polls"]).append((sent, time.time()))
                    body = resp.json() if ok else None
                    if body is not None and "pass_token" in body:  # the join's, or a new one once placed
                        self.poll_url = body["poll_url"]
                        self.signed_pass = (body["poll_header"], body["pass_token"])
                    return body
            gevent.sleep(min(8, 2**attempt) * random.uniform(0.5, 1.0))
        return None

    def buy(self):
        with obeying_retry_after(
            self.client,
            "POST",
            "/v1/checkout",
            key="checkout admitted",
            json={"items": [{"product_id": FLASH_PRODUCT, "qty": 1}]},
            headers=self.auth,
            name="POST /v1/checkout [admitted]",
        ) as (resp, sent):
            if resp is None:
                return GAVE_UP
            code = (resp.json() or {}).get("code") if resp.status_code in (409, 410) else None
            QUEUE["checkouts"].append((sent, time.time(), resp.status_code, code))
            count("checkout admitted", f"{resp.status_code} {code}" if code else resp.status_code)
            if resp.status_code == 201 or (
                resp.status_code in (409, 410) and code in ("stock_conflict", "admission_expired")
            ):
                resp.success()
            else:
                resp.failure(f"unexpected {resp.status_code}: {(resp.text or '')[:200]}")
            order = resp.json() if resp.status_code == 201 else None
        if order is not None:
            self.pay(order["order_id"], order["total"])
            return "201"
        return f"{resp.status_code} {code}" if code else str(resp.status_code)

    @task
    def queue_and_buy(self):
        gevent.sleep(random.uniform(0, QUEUE_JOIN_SPREAD))
        queue_pass = self.queue_pass("post")
        final = "error"
        for _ in range(5000):
            if queue_pass is None:
                break
            state = queue_pass["state"]
            if state == "admitted":
                final = self.buy()
                break
            if state in ("sold_out", "expired", "used", GAVE_UP):
                if state == "sold_out" and QUEUE["first_sold_out"] is None:
                    QUEUE["first_sold_out"] = time.time()
                final = state
                break
            gevent.sleep(queue_pass["poll_after"] or 1)
            queue_pass = self.queue_pass("get")
        QUEUE["final"][final] += 1
        QUEUE["done"] += 1
        if QUEUE["done"] == QUEUE_BUYERS:
            gevent.spawn_later(0.1, self.environment.runner.quit)
        raise StopUser()


def queue_report(opening_at):
    """Admitted checkouts' p50/p99, polls' p99 and rate, the time from the opening to the last sale and to the
    first sold_out answer (seconds, this machine's clock = the database's: the load test runs beside it)."""

    def pct(values, q):
        values = sorted(values)
        return round(values[min(len(values) - 1, int(q * len(values)))], 1) if values else None

    checkouts = [(answered - sent) * 1000 for sent, answered, _s, _c in QUEUE["checkouts"]]
    polls = QUEUE["polls"]
    poll_ms = [(answered - sent) * 1000 for sent, answered in polls]
    per_second = collections.Counter(int(sent) for sent, _a in polls)
    span = (max(s for s, _a in polls) - min(s for s, _a in polls)) if len(polls) > 1 else 0
    sales = [answered for _s, answered, status, _c in QUEUE["checkouts"] if status == 201]
    return {
        "queue_buyers": QUEUE_BUYERS,
        "queue_finals": dict(QUEUE["final"]),
        "queue_checkout_p50_ms": pct(checkouts, 0.5),
        "queue_checkout_p99_ms": pct(checkouts, 0.99),
        "queue_checkout_max_ms": round(max(checkouts), 1) if checkouts else None,
        "queue_join_p99_ms": pct([(a - s) * 1000 for s, a in QUEUE["joins"]], 0.99),
        "queue_polls": len(polls),
        "queue_poll_p50_ms": pct(poll_ms, 0.5),
        "queue_poll_p99_ms": pct(poll_ms, 0.99),
        "queue_polls_per_second_mean": round(len(polls) / span, 1) if span else None,
        "queue_polls_per_second_peak": max(per_second.values()) if per_second else None,
        "queue_last_sale_after_opening_s": round(max(sales) - opening_at, 2) if sales and opening_at else None,
        "queue_first_sold_out_after_opening_s": round(QUEUE["first_sold_out"] - opening_at, 2)
        if QUEUE["first_sold_out"] and opening_at
        else None,
    }


def shed_report():
    """The honest 503s by who answered (the front, the application): how many, their client-side p50/p99; the
    requests never answered (status 0: time-outs, refused or reset connections); the buyers who gave up."""

    def pct(values, q):
        values = sorted(values)
        return round(values[min(len(values) - 1, int(q * len(values)))], 1) if values else None

    report = {"no_answer": sum(counter.get("0", 0) for counter in COUNTS.values())}
    report["gave_up"] = sum(counter.get(GAVE_UP, 0) for counter in COUNTS.values())
    for source, answers in SHED.items():
        latencies = [(answered - sent) * 1000 for sent, answered in answers]
        report[f"shed_{source}"] = len(latencies)
        report[f"shed_{source}_p50_ms"] = pct(latencies, 0.5)
        report[f"shed_{source}_p99_ms"] = pct(latencies, 0.99)
    return report


def post_webhook(client, body, header, name):
    """A signed webhook delivery; use as a context manager (``catch_response``) to judge the answer."""
    return client.post(
        "/v1/payments/webhook",
        data=body,
        headers={"Content-Type": "application/json", "X-Signature": header},
        name=name,
        catch_response=True,
    )


class Shopper(CustomerUser):
    wait_time = between(0.2, 1.0)
    weight = 4

    @task(3)
    def browse(self):
        with self.client.get("/v1/products", name="GET /v1/products", catch_response=True) as resp:
            expect(resp, "browse", (200,))
        product = random.choice(SHOP_PRODUCTS)
        with self.client.get(f"/v1/products/{product}", name="GET /v1/products/{id}", catch_response=True) as resp:
            expect(resp, "browse", (200,))

    @task(2)
    def buy(self):
        chosen = random.sample(SHOP_PRODUCTS, random.randint(1, 2))
        items = [{"product_id": pid, "qty": random.randint(1, 2)} for pid in chosen]
        order = self.checkout(items, key="checkout 102-108", name="POST /v1/checkout [102-108]")
        if order is None:
            return
        order_id = order["order_id"]
        with self.client.get(
            f"/v1/orders/{order_id}", headers=self.auth, name="GET /v1/orders/{id}", catch_response=True
        ) as resp:
            expect(resp, "order read", (200,))
        roll = random.random()
        if roll < 0.7:
            self.pay(order_id, order["total"])
        elif roll < 0.9:
            with self.client.post(
                f"/v1/orders/{order_id}/cancel",
                headers=self.auth,
                name="POST /v1/orders/{id}/cancel",
                catch_response=True,
            ) as resp:
                if expect(resp, "cancel", (200,)) and resp.json().get("status") != "cancelled":
                    resp.failure(f"cancel answered {resp.text[:200]}")
        # else: abandoned; the reservation waits for the sweeper


class CartShopper(CustomerUser):
    """Builds a cart before the sale, waits, and checks it out; some wait past the cart's expiry."""

    wait_time = between(0.2, 1.0)
    weight = 2

    def cart_items(self):
        chosen = random.sample(SHOP_PRODUCTS, random.randint(1, 2))
        return [{"product_id": pid, "qty": random.randint(1, 2)} for pid in chosen]

    def build_cart(self):
        with self.client.post(
            "/v1/carts",
            json={"items": self.cart_items()},
            headers=self.auth,
            name="POST /v1/carts",
            catch_response=True,
        ) as resp:
            if not expect(resp, "cart create", (201,)):
                return None
            cart_id = resp.json()["cart_id"]
        with self.client.get(
            f"/v1/carts/{cart_id}", headers=self.auth, name="GET /v1/carts/{id}", catch_response=True
        ) as resp:
            expect(resp, "cart read", (200,))
        if random.random() < 0.5:
            with self.client.put(
                f"/v1/carts/{cart_id}",
                json={"items": self.cart_items()},
                headers=self.auth,
                name="PUT /v1/carts/{id}",
                catch_response=True,
            ) as resp:
                expect(resp, "cart replace", (200,))
        return cart_id

    def post_cart_checkout(self, cart_id, name, headers=None):
        return self.client.post(
            f"/v1/carts/{cart_id}/checkout",
            headers={**self.auth, **(headers or {})},
            name=name,
            catch_response=True,
        )

    @task
    def cart_then_checkout(self):
        cart_id = self.build_cart()
        if cart_id is None:
            return
        if random.random() < LATE_CART_SHARE:
            gevent.sleep(CART_TTL_SECONDS + 1)  # past the cart's expiry (set by the database clock at its last change)
            with self.post_cart_checkout(cart_id, "POST /v1/carts/{id}/checkout [expired]") as resp:
                if expect(resp, "cart checkout expired", (410,)) and resp.json().get("code") != "cart_expired":
                    resp.failure(f"410 without code cart_expired: {resp.text[:200]}")
            cart_id = self.build_cart()  # rebuild, as the 410 says
            if cart_id is None:
                return
        else:
            gevent.sleep(random.uniform(0, min(1.0, CART_TTL_SECONDS / 4)))
        key = {"Idempotency-Key": uuid.uuid4().hex}
        with self.post_cart_checkout(cart_id, "POST /v1/carts/{id}/checkout", key) as resp:
            if not expect(resp, "cart checkout", (201, 409)):
                return
            if resp.status_code == 409:
                if resp.json().get("code") != "stock_conflict":
                    resp.failure(f"409 without code stock_conflict: {resp.text[:200]}")
                return
            order = resp.json()
        # The customer presses pay again: the same cart never becomes a second order.
        with self.post_cart_checkout(cart_id, "POST /v1/carts/{id}/checkout [again]") as resp:
            if expect(resp, "cart checkout again", (409,)) and (
                resp.json().get("code"),
                resp.json().get("order_id"),
            ) != ("cart_checked_out", order["order_id"]):
                resp.failure(f"a second checkout of a cart answered {resp.text[:200]}")
        if random.random() < 0.7:
            self.pay(order["order_id"], order["total"])


class WebhookReplayer(FastHttpUser):
    """Gateways deliver at least once: re-send applied events, verbatim or re-signed; each must be a no-op."""

    wait_time = between(0.2, 0.6)
    weight = 1

    @task
    def replay(self):
        if not SENT_EVENTS:
            return
        body, header, signed_at = random.choice(SENT_EVENTS)
        if random.random() < 0.5 or time.time() - signed_at > 200:
            header = sign(body=body, secret=SECRET)  # a retry signed afresh
        with post_webhook(self.client, body, header, "POST /v1/payments/webhook [replay]") as resp:
            if expect(resp, "webhook replay", (200,)) and resp.json().get("status") != "duplicate":
                resp.failure(f"a replayed event was applied again: {resp.text[:200]}")


# --- distributed runs: workers send their counters to the master ------------------------------------------


@events.report_to_master.add_listener
def _report_counts(client_id, data, **_kwargs):
    data["checkout_counts"] = {key: dict(counter) for key, counter in COUNTS.items()}
    COUNTS.clear()


@events.worker_report.add_listener
def _merge_counts(client_id, data, **_kwargs):
    for key, counter in data.get("checkout_counts", {}).items():
        COUNTS[key].update(counter)


# --- setup and invariant checks (master or local runner only) ---------------------------------------------


def _run(args):
    env = dict(os.environ)
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, check=False)  # noqa: S603 - our own manage.py


def _clean(text):
    return "\n".join(
        line for line in text.splitlines() if "XDG_RUNTIME_DIR" not in line and "user_runtime_dir" not in line
    )


@events.test_start.add_listener
def _flash_sale_setup(environment, **_kwargs):
    if isinstance(environment.runner, WorkerRunner) or STATE["since_order_id"] is not None:
        return
    proc = _run([sys.executable, "manage.py", "flash_sale_setup", "--stock", str(FLASH_SALE_STOCK)])
    print(_clean(proc.stdout + proc.stderr), flush=True)
    for word in proc.stdout.split():
        if word.startswith("max_order_id="):
            STATE["since_order_id"] = word.split("=", 1)[1]
    if proc.returncode != 0 or STATE["since_order_id"] is None:
        print("flash_sale_setup failed: the run cannot be checked", flush=True)
        environment.process_exit_code = 1
        if environment.runner:
            gevent.spawn_later(0, environment.runner.quit)


@events.quitting.add_listener
def _check_invariants(environment, **_kwargs):
    if isinstance(environment.runner, WorkerRunner):
        return
    violations = []
    total = environment.stats.total
    print("\n=== swarm checks ===", flush=True)
    print(f"customer tokens: {len(TOKENS)}" + (" (ONE shared token for every user)" if SHARED_TOKEN else ""))
    for key in sorted(COUNTS):
        statuses = ", ".join(f"{status}: {n}" for status, n in sorted(COUNTS[key].items()))
        print(f"  {key:<22} {statuses}")
    flash = COUNTS.get(f"checkout {FLASH_PRODUCT}", collections.Counter())
    created, conflicts = flash.get("201", 0), flash.get("409", 0)
    opening = opening_report() if OPENING_BUYERS else {}
    if OPENING_BUYERS:
        created, conflicts = OPENING["final"].get("201", 0), OPENING["final"].get("409 stock_conflict", 0)
        print("opening: " + ", ".join(f"{k}={v}" for k, v in opening.items()), flush=True)
        if OPENING["done"] != OPENING_BUYERS:
            violations.append(f"{OPENING_BUYERS} opening buyers but only {OPENING['done']} got a final answer")
    queue = {}
    if QUEUE_BUYERS:
        created, conflicts = QUEUE["final"].get("201", 0), QUEUE["final"].get("sold_out", 0)
        opening_at = float(os.environ.get("QUEUE_OPENS_AT_EPOCH", "0")) or None
        queue = queue_report(opening_at)
        print("queue: " + ", ".join(f"{k}={v}" for k, v in queue.items()), flush=True)
        if QUEUE["done"] != QUEUE_BUYERS:
            violations.append(f"{QUEUE_BUYERS} queue buyers but only {QUEUE['done']} got a final answer")
        # Bought, told sold_out, or admitted but too late (the turn went to the next): anything else is a failure.
        if set(QUEUE["final"]) - {"201", "sold_out", "expired", "410 admission_expired"}:
            violations.append(f"queue buyers ended otherwise than bought, sold_out or expired: {dict(QUEUE['final'])}")
    print(f"flash sale (product {FLASH_PRODUCT}, stock {FLASH_SALE_STOCK}): created={created} conflict={conflicts}")
    # Honest 503s (with Retry-After) are answers the buyers obeyed; any other 5xx is a server error.
    server_errors = sum(
        n
        for counter in COUNTS.values()
        for status, n in counter.items()
        if status.startswith("5") and status not in HONEST_503
    )
    shed = shed_report()
    print("503 with Retry-After: " + ", ".join(f"{k}={v}" for k, v in shed.items()), flush=True)
    if total.num_failures:
        violations.append(f"{total.num_failures} failed requests (5xx: {server_errors})")
    if created > FLASH_SALE_STOCK:
        violations.append(
            f"OVERSELL: {created} checkouts of product {FLASH_PRODUCT} succeeded for stock {FLASH_SALE_STOCK}"
        )
    gave_up = flash.get(GAVE_UP, 0)
    if BURST and created + conflicts + gave_up != BURST:
        violations.append(
            f"{BURST} flash-sale buyers but only {created + conflicts} got a 201 or a 409 ({gave_up} gave up)"
        )
    audit = _run([sys.executable, "manage.py", "audit_inventory"])
    print(_clean(audit.stdout + audit.stderr), flush=True)
    if audit.returncode != 0:
        violations.append("audit_inventory found violations")
    if STATE["since_order_id"] is not None:
        check = _run(
            [
                sys.executable,
                "-m",
                "devtools.djangoctl",
                "flash-sale-check",
                "--product",
                str(FLASH_PRODUCT),
                "--since-order-id",
                str(STATE["since_order_id"]),
                "--stock",
                str(FLASH_SALE_STOCK),
                "--client-created",
                str(created),
            ]
        )
        print(_clean(check.stdout + check.stderr), flush=True)
        if check.returncode != 0:
            violations.append(f"more units of product {FLASH_PRODUCT} held by orders than the flash-sale stock")
    else:
        violations.append("no flash-sale setup marker: the oversell check could not run")
    for violation in violations:
        print(f"VIOLATION: {violation}", flush=True)
    print("swarm checks: " + ("FAILED" if violations else "all passed"), flush=True)
    summary_path = os.environ.get("LOADTEST_SUMMARY")
    if summary_path:
        Path(summary_path).write_text(
            json.dumps(
                {
                    "counts": {key: dict(counter) for key, counter in COUNTS.items()},
                    "created": created,
                    "conflicts": conflicts,
                    "requests": total.num_requests,
                    "failures": total.num_failures,
                    "server_errors": server_errors,
                    **shed,
                    "p50_ms": total.get_response_time_percentile(0.5),
                    "p95_ms": total.get_response_time_percentile(0.95),
                    "p99_ms": total.get_response_time_percentile(0.99),
                    "rps": total.total_rps,
                    "violations": violations,
                    **opening,
                    **queue,
                },
                indent=2,
            )
        )
    if violations:
        environment.process_exit_code = 1
    elif environment.process_exit_code is None:
        environment.process_exit_code = 0
