"""The client of the rehearsals (``make failover``, ``make deploy-rehearsal``, ``make restore-rehearsal``): every
request a shopper starts ends counted, and a rehearsal cannot pass on requests it did not count.

- :class:`Recorder` sends one request and records it, whatever happens: an answer (any status, with the
  ``X-Release`` the instance named), a time-out, or an error (a refused connection, a body cut off mid-way —
  ``http.client.IncompleteRead`` —, any exception): the request is counted as started before it is sent and recorded
  when it ends, never dropped with the thread that sent it.
- :meth:`Recorder.shopper_thread` runs a shopper; an exception that escapes it (or a shopper still running when the
  load stops) is a *lost* thread, and a lost thread fails the run: the requests it would have sent are not there.
- :func:`tally` and :func:`verdict`: requests started against those counted, 5xx answers, time-outs and errors
  (:func:`failed`), lost threads, and the rehearsal's stated minimum of requests and of shoppers who sent any.

``skincare/tests/test_rehearsal_client.py`` runs it against a tiny local HTTP server that cuts a body mid-way and
answers 500.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from devtools.failover_proof import Call
from devtools.processes import http_call, payment_webhook

RELEASE_HEADER = "X-Release"  # the release that answered (RELEASE_ID), set by skincare.middleware
RETRY_PAUSE = 0.25  # make failover's client backoff after a 503 (the server suggests Retry-After: 2)
TIMEOUT_SECONDS = 30.0


def timed_out(error: BaseException) -> bool:
    """Whether a request ended because the client stopped waiting (the connect or a read), not because it failed."""
    if isinstance(error, urllib.error.URLError) and isinstance(error.reason, BaseException):
        error = error.reason
    return isinstance(error, TimeoutError)


@dataclass
class Recorder:
    """Every HTTP request and how it ended, as the client saw it (thread-safe)."""

    timeout: float = TIMEOUT_SECONDS
    lock: threading.Lock = field(default_factory=threading.Lock)
    calls: list[Call] = field(default_factory=list)
    started: int = 0  # requests begun; each one ends in ``calls``
    lost: list[str] = field(default_factory=list)  # shoppers whose thread ended by an exception or never ended

    def send(self, call: Call, base: str, path: str, body: bytes | None, headers: dict[str, str]) -> Call:
        with self.lock:
            self.started += 1
        call.started = time.monotonic()
        payload = b""
        try:
            call.status, payload, answer = http_call(base, path, body=body, headers=headers, timeout=self.timeout)
            call.outcome = "answer"
            call.replayed = call.status < 400 and answer.get("Idempotent-Replayed") == "true"
            call.release = answer.get(RELEASE_HEADER) or ""
        except Exception as error:  # whatever ends a request without a whole answer is counted, never dropped
            call.status, payload, call.error = 0, b"", repr(error)
            call.outcome = "timeout" if timed_out(error) else "error"
        finally:
            call.ended = time.monotonic()
            try:
                call.body = json.loads(payload) if payload else {}
            except ValueError:
                call.body = {"raw": payload[:200].decode(errors="replace")}
            with self.lock:
                self.calls.append(call)
        return call

    def until_answered(self, make: Any, deadline: float) -> Call:
        """Send the same request again while it is answered 503 (or not at all), until ``deadline``."""
        while True:
            call = make()
            if call.status not in (0, 503) or time.monotonic() > deadline:
                return call
            time.sleep(RETRY_PAUSE)

    def checkout(self, base: str, token: str, customer: str, key: str, items: list[tuple[int, int]]) -> Call:
        body = json.dumps({"items": [{"product_id": p, "qty": q} for p, q in items]}).encode()
        headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": key}
        call = Call("checkout", 0, {}, 0.0, 0.0, customer=customer, key=key, items=items)
        return self.send(call, base, "/v1/checkout", body, headers)

    def pay(self, base: str, order: dict[str, Any], event_id: str, customer: str = "") -> Call:
        body, headers = payment_webhook(order, event_id=event_id, reference=f"psp-{event_id}")
        call = Call("webhook", 0, {}, 0.0, 0.0, customer=customer, order_id=int(order["order_id"]), event_id=event_id)
        return self.send(call, base, "/v1/payments/webhook", body, headers)

    def cancel(self, base: str, token: str, order_id: int, customer: str = "") -> Call:
        call = Call("cancel", 0, {}, 0.0, 0.0, customer=customer, order_id=order_id)
        return self.send(call, base, f"/v1/orders/{order_id}/cancel", b"", {"Authorization": f"Bearer {token}"})

    def shopper_thread(self, shopper: Callable[[int], None], i: int) -> threading.Thread:
        """Shopper ``i`` in a thread of its own; an exception that ends it is recorded as a lost thread."""

        def run() -> None:
            try:
                shopper(i)
            except BaseException as error:  # a shopper that dies is counted, whatever killed it
                with self.lock:
                    self.lost.append(f"shopper {i} died: {error!r}")

        return threading.Thread(target=run, name=f"shopper-{i}", daemon=True)

    def join(self, threads: list[threading.Thread], timeout: float) -> None:
        """Wait for the shoppers to end (at most ``timeout`` seconds in all); one still running is lost."""
        deadline = time.monotonic() + timeout
        for t in threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                with self.lock:
                    self.lost.append(f"{t.name} did not stop within {timeout:.0f}s")


def failed(calls: list[Call]) -> list[Call]:
    """Requests a buyer would count as failed: no answer (a time-out, an error) or any 5xx."""
    return [c for c in calls if c.outcome != "answer" or c.status >= 500]


@dataclass(frozen=True)
class Tally:
    requests: int  # started
    answers: int
    timeouts: int
    errors: int
    server_errors: int  # answers 5xx
    shoppers: int  # distinct customers who sent at least one request
    lost: tuple[str, ...]

    @property
    def failed(self) -> int:
        return self.timeouts + self.errors + self.server_errors

    @property
    def uncounted(self) -> int:
        return self.requests - self.answers - self.timeouts - self.errors

    def facts(self) -> dict[str, int]:
        return {
            "requests": self.requests,
            "shoppers": self.shoppers,
            "answered": self.answers,
            "answered_5xx": self.server_errors,
            "timed_out": self.timeouts,
            "errors": self.errors,
            "failed": self.failed,
            "not_counted": self.uncounted,
            "lost_threads": len(self.lost),
        }


def tally(recorder: Recorder) -> Tally:
    with recorder.lock:
        calls, started, lost = list(recorder.calls), recorder.started, tuple(recorder.lost)
    return Tally(
        requests=started,
        answers=sum(1 for c in calls if c.outcome == "answer"),
        timeouts=sum(1 for c in calls if c.outcome == "timeout"),
        errors=sum(1 for c in calls if c.outcome == "error"),
        server_errors=sum(1 for c in calls if c.outcome == "answer" and c.status >= 500),
        shoppers=len({c.customer for c in calls if c.customer}),
        lost=lost,
    )


def verdict(t: Tally, *, min_requests: int, min_shoppers: int, failures_allowed: bool = False) -> list[str]:
    """What makes the run's client side fail: a request not counted, a lost thread, fewer requests or shoppers than
    the rehearsal states, and (unless the rehearsal expects them, e.g. after its mistake) any failed request."""
    problems = []
    if t.uncounted:
        problems.append(f"{t.uncounted} of {t.requests} requests started did not end counted")
    problems += [f"lost shopper thread: {lost}" for lost in t.lost]
    if t.requests < min_requests:
        problems.append(f"{t.requests} requests, fewer than the rehearsal's minimum of {min_requests}")
    if t.shoppers < min_shoppers:
        problems.append(f"{t.shoppers} shoppers sent requests, fewer than the rehearsal's minimum of {min_shoppers}")
    if t.failed and not failures_allowed:
        problems.append(
            f"{t.failed} requests failed: {t.server_errors} answered 5xx, {t.timeouts} timed out, {t.errors} errors"
        )
    return problems
