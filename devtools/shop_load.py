"""The shoppers of the rehearsals that change or restore a running shop (``make deploy-rehearsal``,
``make restore-rehearsal``): each checks out with its own ``Idempotency-Key`` (the flash product or one of the
others), then pays by signed webhook, cancels or abandons (abandoned carts expire and are swept), until told to stop.
Every request and how it ended is recorded (:class:`devtools.rehearsal_client.Recorder`) for the one client-side
proof (:mod:`devtools.failover_proof`) and the count (:func:`devtools.rehearsal_client.verdict`). No request is
retried: a 5xx, a time-out or an error is a failure of the rehearsal, and so is a shopper thread lost.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from devtools.failover_proof import Call
from devtools.rehearsal_client import Recorder, failed

__all__ = ["ShopLoad", "count", "failed", "p99_ms", "wait_until"]


@dataclass
class ShopLoad:
    base: str  # where every request goes (HAProxy)
    tokens: list[str]
    customers: list[str]
    flash_product: int
    products: list[int]
    key_prefix: str  # the Idempotency-Keys are <prefix>-<shopper>-<n>; webhook events evt-<key>
    pause: float = 0.0  # seconds a shopper waits between two checkouts (keeps the load bounded)
    recorder: Recorder = field(default_factory=Recorder)
    actions: Counter[str] = field(default_factory=Counter)
    stopping: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def shopper(self, i: int) -> None:
        rng = random.Random(i)
        n = 0
        while not self.stopping.is_set():
            n += 1
            key = f"{self.key_prefix}-{i}-{n}"
            if rng.random() < 0.5:
                items = [(self.flash_product, 1)]
            else:
                items = [(p, rng.randint(1, 2)) for p in sorted(rng.sample(self.products, rng.randint(1, 2)))]
            call = self.recorder.checkout(self.base, self.tokens[i], self.customers[i], key, items)
            if call.status == 201:
                action = rng.choices(["pay", "cancel", "abandon"], weights=[5, 2, 3])[0]
                with self.recorder.lock:
                    self.actions[action] += 1
                if action == "pay":
                    self.recorder.pay(self.base, call.body, f"evt-{key}", self.customers[i])
                elif action == "cancel":
                    self.recorder.cancel(self.base, self.tokens[i], int(call.body["order_id"]), self.customers[i])
            self.stopping.wait(self.pause)

    def start(self, shoppers: int) -> ShopLoad:
        self.threads = [self.recorder.shopper_thread(self.shopper, i) for i in range(shoppers)]
        for t in self.threads:
            t.start()
        return self

    def stop(self) -> None:
        """Stop the shoppers and wait for them; the second call finds them stopped (a lost one is counted once)."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        self.recorder.join(self.threads, 90)

    @property
    def calls(self) -> list[Call]:
        with self.recorder.lock:
            return list(self.recorder.calls)


def p99_ms(calls: list[Call], *, kind: str = "checkout", since: float = 0.0, until: float = float("inf")) -> float:
    """The 99th percentile of the answer times (ms) of the ``kind`` requests started in [since, until]."""
    times = sorted(c.ended - c.started for c in calls if c.kind == kind and since <= c.started <= until)
    if not times:
        return 0.0
    return 1000 * times[min(len(times) - 1, int(0.99 * len(times)))]


def count(calls: list[Call], *, kind: str = "checkout", since: float = 0.0, until: float = float("inf")) -> int:
    return sum(1 for c in calls if c.kind == kind and since <= c.started <= until)


def wait_until(predicate: object, timeout: float) -> bool:
    """Poll ``predicate()`` every 0.2 s until true or ``timeout`` (a condition no event signals: another process)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.2)
    return False
