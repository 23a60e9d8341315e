"""A light open-model load client for large waiting crowds (``python -m bench.crowd``; ``python -m bench crowd``
runs the 50,000-waiting profile with it, bench/waitline.py).

Each virtual buyer is an entry in a heap of due times, not a task or a greenlet: a dispatcher moves the due entries
to a ready queue, and one coroutine per connection of a bounded pool (HTTP/1.1 over asyncio streams, kept alive
when the server allows it, reopened when it closes) sends them. A buyer joins the queue at its moment, polls
exactly ``poll_after`` seconds after each answer (with the signed pass in the ``Queue-Pass`` header, or without it:
the database-read poll), checks out once admitted, pays by the signed webhook, and stops at a final state.

Three times are kept apart, per kind of request:
- ``latency``: from writing the request on a connection (a connect included when the server closed the last one)
  to its last byte: the service's time, the server's own backlog included;
- ``lag``: from the moment the request was due to its writing: the client's own delay, made of the dispatcher
  waking late (``loop_lag``: the client's CPU) and the wait for a free connection of the pool (the server holding
  every connection);
- the client's CPU (``resource.getrusage`` of its own process, per second).
A buyer's **join answer** spans both, and any retry: from its arrival (the join's first due time) to the answer
that gave it a pass; the report keeps when each pass was answered, which bench/waitline.py compares with the passes
the database holds.
The client is **saturated** when its loop lag p99 passes LOOP_LAG_BOUND_MS or its CPU over its busiest
CPU_WINDOW_SECONDS passes CPU_BOUND of one core; then its latencies are not the service's and the run says so.

Why not Locust here: one FastHttpUser is a greenlet with its own session for the whole life of the buyer, and
Locust's bookkeeping (events, stats) runs per request. Measured on this 2-core machine against the same gunicorn (3
sync workers, ``/healthz``, 16 concurrent requests): Locust's marginal client CPU was 0.53 ms per request, this
client's 0.25 ms (most of it the kernel's connect and close: the sync workers close every connection); 20,000 Locust
users that make one request each and then wait took 600 MB and 20 s of CPU and had not all sent it 20 s after the
start, while this client holds 50,000 buyers in about 100 MB. Standard library only: nothing to install.
"""

import argparse
import asyncio
import heapq
import itertools
import json
import random
import resource
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

LOOP_LAG_BOUND_MS = 50.0
CPU_BOUND, CPU_WINDOW_SECONDS = 0.9, 5
WAKE_SECONDS = 0.01  # the dispatcher's longest sleep: a poll scheduled meanwhile is sent at most this late
TIMEOUT_SECONDS = 30.0  # a request unanswered this long is a time-out (counted, retried)
FINAL_STATES = ("sold_out", "expired", "used")


# The requests a buyer makes: the report names each, answered or not.
STEPS = ("join", "poll", "checkout")


def pct(values: list[float], q: float) -> float | None:
    """The q-quantile of ``values`` (nearest rank), in the values' unit; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def saturated(*, loop_lag_p99_ms: float | None, cpu_per_second: list[float]) -> bool:
    """Whether the client, not the service, set the pace: its dispatcher woke late, or its CPU stayed near a core."""
    window = CPU_WINDOW_SECONDS
    busiest = max(
        (sum(cpu_per_second[i : i + window]) / window for i in range(max(1, len(cpu_per_second) - window + 1))),
        default=0.0,
    )
    return (loop_lag_p99_ms or 0.0) > LOOP_LAG_BOUND_MS or busiest > CPU_BOUND


class Connection:
    """One slot of the pool: an HTTP/1.1 connection, reopened when the server closed the previous one."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def request(self, raw: bytes) -> tuple[int, dict[str, str], bytes]:
        """Send ``raw`` and read the answer: (status, lower-cased headers, body). A kept-alive connection the server
        closed in between is reopened once; any other failure raises (OSError, IncompleteReadError)."""
        reused = self.writer is not None
        try:
            return await self._exchange(raw)
        except (ConnectionError, asyncio.IncompleteReadError):
            self.close()
            if not reused:
                raise
        return await self._exchange(raw)

    async def _exchange(self, raw: bytes) -> tuple[int, dict[str, str], bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(raw)
        head = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(head[0].split(" ", 2)[1])
        headers = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            if name:
                headers[name.strip().lower()] = value.strip()
        if "content-length" in headers:
            body = await self.reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while size := int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16):
                body += (await self.reader.readexactly(size + 2))[:-2]
            await self.reader.readuntil(b"\r\n")
        else:
            body = await self.reader.read()
            headers["connection"] = "close"
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, headers, body


class Buyer:
    __slots__ = ("arrived", "auth", "final", "n", "order", "pass_token", "poll_path", "retries", "step")

    def __init__(self, n: int, token: str, arrived: float) -> None:
        self.n, self.auth, self.step, self.arrived = n, f"Authorization: Bearer {token}\r\n", "join", arrived
        self.poll_path = self.pass_token = self.final = None
        self.order: dict[str, Any] | None = None
        self.retries = 0


class Crowd:
    """The buyers of one queued product, their schedule, the pool, and what was measured."""

    def __init__(
        self,
        base: str,
        tokens: list[str],
        *,
        join_times: list[float],
        ends_at: float,
        opens_at: float,
        send_pass: bool = True,
        connections: int = 64,
        product_id: int = 101,
        trace: bool = False,
    ) -> None:
        url = urlparse(base)
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 80
        self.buyers = [Buyer(n, token, at) for n, (token, at) in enumerate(zip(tokens, join_times, strict=True))]
        self.ends_at, self.opens_at, self.send_pass = ends_at, opens_at, send_pass
        self.connections, self.product_id = connections, product_id
        self.latency: dict[str, list[float]] = {}
        self.lag: dict[str, list[float]] = {}
        self.loop_lag: list[float] = []
        self.statuses: Counter[str] = Counter()
        self.finals: Counter[str] = Counter()
        self.polls_due: Counter[int] = Counter()  # by second from the opening
        self.polls_answered: Counter[int] = Counter()
        self.answered_per_second: Counter[int] = Counter()  # every kind of request
        self.joins_answered_at: list[float] = []  # each buyer's first pass, when its answer arrived
        self.join_answer: list[float] = []  # and how long after the buyer arrived (retries included)
        self.cpu_per_second: list[float] = []
        self.done = 0
        self.last_sale_at: float | None = None
        self.first_sold_out_at: float | None = None
        self.trace: list[tuple[int, str, float, float, float, bytes]] | None = [] if trace else None
        self.heap: list[tuple[float, int, Buyer]] = []
        self.seq = itertools.count()
        self.ready: asyncio.Queue[tuple[float, Buyer]] = asyncio.Queue()
        for buyer in self.buyers:
            self.schedule(buyer, buyer.arrived)

    def schedule(self, buyer: Buyer, at: float, *, now: bool = False) -> None:
        """Buyer's next request at ``at``; ``now``: due at once (``at`` is the present), straight to the pool."""
        if now:
            self.ready.put_nowait((at, buyer))
            return
        heapq.heappush(self.heap, (at, next(self.seq), buyer))
        if buyer.step == "poll":
            self.polls_due[self.second(at)] += 1

    def second(self, t: float) -> int:
        """The whole second from the opening that ``t`` falls in (-1 is the last second before it)."""
        return int(t - self.opens_at) if t >= self.opens_at else int(t - self.opens_at) - 1

    def finish(self, buyer: Buyer, final: str) -> None:
        buyer.final, buyer.step = final, "done"
        self.finals[final] += 1
        self.done += 1

    # --- what each step sends -----------------------------------------------------------------------------------

    def raw_request(self, buyer: Buyer) -> bytes:
        host = f"Host: {self.host}:{self.port}\r\n"
        if buyer.step == "join":
            return f"POST /v1/products/{self.product_id}/queue HTTP/1.1\r\n{host}{buyer.auth}Content-Length: 0\r\n\r\n".encode()
        if buyer.step == "poll":
            signed = f"Queue-Pass: {buyer.pass_token}\r\n" if self.send_pass and buyer.pass_token else ""
            return f"GET {buyer.poll_path} HTTP/1.1\r\n{host}{buyer.auth}{signed}\r\n".encode()
        if buyer.step == "checkout":
            body = json.dumps({"items": [{"product_id": self.product_id, "qty": 1}]}).encode()
            headers = "Content-Type: application/json\r\n"
        else:  # pay: the gateway's payment.succeeded for the order, signed with the bench's webhook secret
            from devtools.processes import payment_webhook

            assert buyer.order is not None
            ref = f"crowd-{buyer.order['order_id']}"
            body, signature = payment_webhook(buyer.order, event_id=ref, reference=ref)
            headers = f"Content-Type: application/json\r\nX-Signature: {signature['X-Signature']}\r\n"
        path = "/v1/checkout" if buyer.step == "checkout" else "/v1/payments/webhook"
        auth = buyer.auth if buyer.step == "checkout" else ""
        head = f"POST {path} HTTP/1.1\r\n{host}{auth}{headers}Content-Length: {len(body)}\r\n\r\n"
        return head.encode() + body

    # --- what each answer means ---------------------------------------------------------------------------------

    def answered(self, buyer: Buyer, step: str, status: int, headers: dict[str, str], body: bytes, at: float) -> None:
        data = json.loads(body) if body and headers.get("content-type", "").startswith("application/json") else {}
        code = data.get("code") if isinstance(data, dict) else None
        self.statuses[f"{step} {status}{' ' + code if code else ''}"] += 1
        if status in (429, 503) and "retry-after" in headers:  # shed or throttled: back after Retry-After
            self.schedule(buyer, at + float(headers["retry-after"]))
        elif step in ("join", "poll") and status in (200, 201):
            if step == "poll":
                self.polls_answered[self.second(at)] += 1
            if step == "join" and buyer.pass_token is None:
                self.joins_answered_at.append(at)
                self.join_answer.append(at - buyer.arrived)
            if "pass_token" in data:
                buyer.poll_path, buyer.pass_token = data["poll_url"], data["pass_token"]
            self.pass_answered(buyer, data, at)
        elif step == "join" and code == "queue_not_open":
            self.schedule(buyer, at + float(headers.get("retry-after", 1)))
        elif step == "join" and status in (409, 410):
            self.finish(buyer, code or str(status))
        elif step == "checkout" and status == 201:
            buyer.order, buyer.step = data, "pay"
            self.last_sale_at = at
            self.schedule(buyer, at, now=True)
        elif step == "checkout" and status in (409, 410):
            self.finish(buyer, code or str(status))
        elif step == "pay" and status == 200:
            self.finish(buyer, "bought")
        else:
            self.finish(buyer, f"{step} {status}")

    def pass_answered(self, buyer: Buyer, data: dict[str, Any], at: float) -> None:
        state = data["state"]
        if state == "waiting":
            buyer.step = "poll"
            self.schedule(buyer, at + data["poll_after"])
        elif state == "admitted":
            buyer.step = "checkout"
            self.schedule(buyer, at, now=True)
        else:
            if state == "sold_out" and self.first_sold_out_at is None:
                self.first_sold_out_at = at
            self.finish(buyer, state if state in FINAL_STATES else f"state {state}")

    # --- the loop -----------------------------------------------------------------------------------------------

    async def dispatch(self) -> None:
        """Move due entries to the ready queue (recording how late it woke for each) until the end."""
        heap, ready = self.heap, self.ready
        while self.done < len(self.buyers):
            now = time.time()
            if now >= self.ends_at:
                return
            while heap and heap[0][0] <= now:
                due, _, buyer = heapq.heappop(heap)
                self.loop_lag.append(now - due)
                ready.put_nowait((due, buyer))
            await asyncio.sleep(min(heap[0][0] - now, WAKE_SECONDS) if heap else WAKE_SECONDS)

    async def work(self) -> None:
        connection = Connection(self.host, self.port)
        while True:
            due, buyer = await self.ready.get()
            step, raw = buyer.step, self.raw_request(buyer)
            sent = time.time()
            self.lag.setdefault(step, []).append(sent - due)
            try:
                async with asyncio.timeout(TIMEOUT_SECONDS):
                    status, headers, body = await connection.request(raw)
            except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as error:
                connection.close()
                self.statuses[f"{step} {'time-out' if isinstance(error, TimeoutError) else 'no answer'}"] += 1
                buyer.retries += 1  # retried after a short back-off, like a real client
                self.schedule(buyer, time.time() + min(8, 2**buyer.retries) * random.uniform(0.5, 1.0))
                continue
            at = time.time()
            self.answered_per_second[self.second(at)] += 1
            self.latency.setdefault(step, []).append(at - sent)
            if self.trace is not None:
                self.trace.append((buyer.n, step, due, sent, at, body))
            self.answered(buyer, step, status, headers, body, at)

    async def measure_cpu(self) -> None:
        before = resource.getrusage(resource.RUSAGE_SELF)
        while True:
            await asyncio.sleep(1)
            after = resource.getrusage(resource.RUSAGE_SELF)
            self.cpu_per_second.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
            before = after

    async def run(self) -> dict[str, Any]:
        started, cpu_before = time.time(), resource.getrusage(resource.RUSAGE_SELF)
        helpers = [asyncio.create_task(self.work()) for _ in range(self.connections)]
        helpers.append(asyncio.create_task(self.measure_cpu()))
        try:
            await self.dispatch()
        finally:
            for task in helpers:
                task.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
        cpu_after = resource.getrusage(resource.RUSAGE_SELF)
        cpu = cpu_after.ru_utime + cpu_after.ru_stime - cpu_before.ru_utime - cpu_before.ru_stime
        return self.report(seconds=time.time() - started, cpu_seconds=cpu)

    def report(self, *, seconds: float, cpu_seconds: float) -> dict[str, Any]:
        requests = sum(len(v) for v in self.latency.values())
        loop_lag_p99 = pct([lag * 1000 for lag in self.loop_lag], 0.99)
        due = sum(n for s, n in self.polls_due.items() if self.opens_at + s < self.ends_at)
        answered = sum(self.polls_answered.values())
        joins = sorted(self.joins_answered_at)
        join_seconds = Counter(self.second(at) for at in joins)
        join_span = joins[-1] - joins[0] if len(joins) > 1 else 0.0
        return {
            "buyers": len(self.buyers),
            "send_pass": self.send_pass,
            "connections": self.connections,
            "seconds": round(seconds, 1),
            "requests": requests,
            "finals": dict(self.finals),
            "unfinished": len(self.buyers) - self.done,
            "statuses": dict(sorted(self.statuses.items())),
            "latency_ms": {k: {"n": len(v), "p50": pct(v, 0.5), "p99": pct(v, 0.99)} for k, v in self.ms(self.latency)},
            "lag_ms": {k: {"p50": pct(v, 0.5), "p99": pct(v, 0.99), "max": pct(v, 1.0)} for k, v in self.ms(self.lag)},
            "loop_lag_p99_ms": loop_lag_p99,
            "opens_at": self.opens_at,
            "last_sale_at": self.last_sale_at,
            "first_sold_out_at": self.first_sold_out_at,
            "answered_per_second_mean": round(requests / len(self.answered_per_second), 1) if requests else None,
            "answered_per_second_peak": max(self.answered_per_second.values(), default=None),
            "joins_answered": len(joins),
            "join_rate_mean": round(len(joins) / join_span, 1) if join_span else None,
            "join_rate_peak": max(join_seconds.values(), default=None),
            "join_answer_ms": {
                q: pct([s * 1000 for s in self.join_answer], v) for q, v in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))
            },
            "joins_answered_at": [round(at, 3) for at in joins],
            "polls_due": due,
            "polls_answered": answered,
            "polls_sustained_ratio": round(answered / due, 3) if due else None,
            "polls_due_per_second": dict(sorted(self.polls_due.items())),
            "polls_answered_per_second": dict(sorted(self.polls_answered.items())),
            "client_cpu_seconds": round(cpu_seconds, 2),
            "client_cpu_ms_per_request": round(1000 * cpu_seconds / requests, 3) if requests else None,
            "client_cpu_per_second": [round(c, 3) for c in self.cpu_per_second],
            "client_max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "client_saturated": saturated(loop_lag_p99_ms=loop_lag_p99, cpu_per_second=self.cpu_per_second),
        }

    @staticmethod
    def ms(series: dict[str, list[float]]) -> list[tuple[str, list[float]]]:
        """Every step's values in ms: each of STEPS named, an empty list for a step nothing answered."""
        kinds = sorted({*STEPS, *series})
        return [(kind, [s * 1000 for s in series.get(kind, [])]) for kind in kinds]


def join_times(count: int, *, opens_at: float, spread: float, seed: int = 0) -> list[float]:
    """Each buyer's join: uniformly at random over the ``spread`` seconds before the opening."""
    draw = random.Random(seed)
    return [opens_at - spread + draw.uniform(0, spread) for _ in range(count)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.crowd", description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="http://127.0.0.1:PORT")
    parser.add_argument("--tokens", required=True, type=Path, help="JSON list of customer tokens, one per buyer")
    parser.add_argument("--buyers", type=int, help="the first N tokens (all by default)")
    parser.add_argument("--opens-at", type=float, required=True, help="the sale's opening, Unix seconds")
    parser.add_argument("--join-spread", type=float, default=60, help="joins over this many seconds before it (60)")
    parser.add_argument("--until", type=float, default=120, help="stop this many seconds after the opening (120)")
    parser.add_argument("--no-pass", action="store_true", help="poll without the signed pass (the database read)")
    parser.add_argument("--connections", type=int, default=64, help="the pool's connections (64)")
    parser.add_argument("--product", type=int, default=101)
    parser.add_argument("--out", type=Path, help="write the report (JSON) here")
    args = parser.parse_args(argv)
    tokens = json.loads(args.tokens.read_text())[: args.buyers]

    async def go() -> dict[str, Any]:
        crowd = Crowd(
            args.base,
            tokens,
            join_times=join_times(len(tokens), opens_at=args.opens_at, spread=args.join_spread),
            ends_at=args.opens_at + args.until,
            opens_at=args.opens_at,
            send_pass=not args.no_pass,
            connections=args.connections,
            product_id=args.product,
        )
        return await crowd.run()

    report = asyncio.run(go())
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text)
    summary = {k: v for k, v in report.items() if not k.endswith("per_second") and k != "joins_answered_at"}
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
