"""The boundary every gateway call crosses: a whole-call deadline, a bulkhead and a circuit breaker, per process.

- **Deadline.** A call (DNS, connect, TLS, the request, every read) is answered within the gateway's deadline
  (``MIDTRANS_TIMEOUT_SECONDS``) or raises :class:`GatewayUnavailable`. A socket timeout bounds each read, not the call: a gateway that drips its
  answer a byte at a time would hold the caller for as long as it likes. So the call runs on one of the boundary's
  threads and the caller waits for it at most the deadline; a call given up on finishes (or times out) on its thread,
  its answer unused.
- **Bulkhead.** At most ``GATEWAY_MAX_CALLS`` calls of this process are in flight, counting those given up on and not
  yet finished; one more is refused at once (:class:`GatewayUnavailable`, nothing sent), so a stalled gateway cannot
  take every thread of the process, and the sweeper's questions are asked this many at a time.
- **Circuit breaker**, one per endpoint (Midtrans's Snap and its Core API are separate services). After
  ``GATEWAY_BREAKER_FAILURES`` calls to an endpoint in a row failed (no answer, a 5xx, the deadline), it is not called
  for ``GATEWAY_BREAKER_SECONDS``: every call is refused at once with the seconds left as its
  ``Retry-After``. Then one call is let through (half-open): its success closes the breaker, its failure opens it for
  another period.

A refusal is the same 503 ``gateway_unavailable`` as a gateway that did not answer (marked ``sent = False``: the
gateway never heard of it, so a payment page attempt it refused is no transaction to ask about later): the buyer's reservation holds, a
notification is retried by the gateway, the sweeper marks the order for reconciliation. The state is per process
(``boundary()``, made again after a fork): each web worker and each sweeper learns of an outage on its own.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import os
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from django.conf import settings

from payments.exceptions import GatewayRateLimited, GatewayUnavailable

T = TypeVar("T")


class Boundary:
    def __init__(
        self,
        *,
        max_calls: int,
        breaker_failures: int,
        breaker_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_calls = max_calls
        self.breaker_failures = breaker_failures
        self.breaker_seconds = breaker_seconds
        self.clock = clock
        self._lock = threading.Lock()
        self._in_flight = 0
        self._breakers: dict[str, Breaker] = {}  # one per endpoint the caller names (Snap, the Core API)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=max_calls, thread_name_prefix="gateway")

    def call(self, fn: Callable[[], T], *, deadline: float, endpoint: str) -> T:
        """``fn()`` (one request to the gateway's ``endpoint``) within ``deadline`` seconds, or GatewayUnavailable."""
        breaker, trial = self._admit(endpoint)
        future = self._pool.submit(fn)
        future.add_done_callback(self._release)
        try:
            result = future.result(timeout=deadline)
        except concurrent.futures.TimeoutError:
            self._record(breaker, ok=False, trial=trial)
            raise GatewayUnavailable(f"The gateway did not answer within {deadline:g} s.") from None
        except GatewayRateLimited:  # the gateway answered: up, and asking to be asked more slowly
            self._record(breaker, ok=True, trial=trial)
            raise
        except GatewayUnavailable:
            self._record(breaker, ok=False, trial=trial)
            raise
        except BaseException:  # a refusal the gateway answered (4xx read as such by the caller) is an answer
            self._record(breaker, ok=True, trial=trial)
            raise
        self._record(breaker, ok=True, trial=trial)
        return result

    def _admit(self, endpoint: str) -> tuple[Breaker, bool]:
        """Take a slot, or refuse: the endpoint's breaker open (or its trial already in flight), or every slot
        taken. Returns the endpoint's breaker and whether this call is its half-open trial."""
        with self._lock:
            breaker = self._breakers.setdefault(endpoint, Breaker())
            now = self.clock()
            trial = False
            if breaker.failures >= self.breaker_failures:
                if now < breaker.open_until or breaker.trial:
                    wait = max(1, math.ceil(breaker.open_until - now))
                    refused = GatewayUnavailable(
                        f"The gateway's {endpoint} failed {breaker.failures} times in a row; not asking it for "
                        f"{wait} s."
                    )
                    refused.retry_after = wait
                    refused.sent = False  # type: ignore[attr-defined]
                    raise refused
                trial = breaker.trial = True
            if self._in_flight >= self.max_calls:
                if trial:
                    breaker.trial = False
                refused = GatewayUnavailable(f"{self.max_calls} calls to the gateway are already waiting for it.")
                refused.sent = False  # type: ignore[attr-defined]
                raise refused
            self._in_flight += 1
            return breaker, trial

    def _release(self, _future: concurrent.futures.Future[object]) -> None:
        with self._lock:
            self._in_flight -= 1

    def _record(self, breaker: Breaker, *, ok: bool, trial: bool) -> None:
        with self._lock:
            if trial:
                breaker.trial = False
            if ok:
                breaker.failures = 0
                return
            breaker.failures += 1
            if breaker.failures >= self.breaker_failures:
                breaker.open_until = self.clock() + self.breaker_seconds


@dataclasses.dataclass
class Breaker:
    """One endpoint's circuit breaker (guarded by its boundary's lock)."""

    failures: int = 0  # calls in a row that failed
    open_until: float = -math.inf  # every call is refused until then
    trial: bool = False  # a half-open trial call is in flight


_boundary: tuple[int, tuple[object, ...], Boundary] | None = None
_making = threading.Lock()  # the threads of a web worker share one boundary: made by one of them


def boundary() -> Boundary:
    """This process's boundary with the settings' bounds (a new one after a fork or when the settings change)."""
    global _boundary
    bounds = (
        settings.GATEWAY_MAX_CALLS,
        settings.GATEWAY_BREAKER_FAILURES,
        settings.GATEWAY_BREAKER_SECONDS,
    )
    made = _boundary
    if made is None or made[0] != os.getpid() or made[1] != bounds:
        with _making:
            made = _boundary
            if made is None or made[0] != os.getpid() or made[1] != bounds:
                max_calls, failures, seconds = bounds
                made = _boundary = (
                    os.getpid(),
                    bounds,
                    Boundary(max_calls=max_calls, breaker_failures=failures, breaker_seconds=seconds),
                )
    return made[2]


def forget() -> None:
    """Start this process's boundary afresh: breaker closed, no call counted (the tests' isolation)."""
    global _boundary
    _boundary = None
