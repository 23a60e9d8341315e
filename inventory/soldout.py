"""A per-process memory of products seen short of stock, so a sold-out flood is refused without the database.

When a checkout finds a product short (the early read sees ``available_stock < qty``, or the guarded UPDATE
changes no row), this module remembers an upper bound of that product's available stock for
``SOLD_OUT_CACHE_MS`` milliseconds (default 250, never more than 250). A checkout that asks for more than that
bound within the window is refused at once with ``409 stock_conflict``, before any query.

Why it is safe:

* It can only *refuse*. Nothing here ever lets a checkout through: a product that is not remembered, or whose
  memory expired, goes to the database, where the guarded UPDATE decides as always.
* The staleness is bounded. Stock that comes back (a cancel, the sweeper, a restock) is invisible to this
  process for at most the window: a customer may get a 409 up to 250 ms after a unit came back, which is what
  they would have got a moment earlier. Set ``SOLD_OUT_CACHE_MS=0`` to turn it off.
* It is per process and per product id (bounded to ``MAX_ENTRIES`` products); nothing is shared, nothing is
  stored outside memory, and the clock is this process's monotonic clock (it decides nothing about orders:
  every expiry decision still uses the database's ``now()``).
"""

import time
from collections.abc import Callable, Mapping

from django.conf import settings

MAX_WINDOW_SECONDS = 0.25
MAX_ENTRIES = 10_000

# product_id -> (monotonic time until which the bound holds, upper bound of available stock)
_short: dict[int, tuple[float, int]] = {}
clock: Callable[[], float] = time.monotonic


def window_seconds() -> float:
    return min(max(settings.SOLD_OUT_CACHE_MS, 0) / 1000, MAX_WINDOW_SECONDS)


def remember_short(product_id: int, *, available_at_most: int) -> None:
    """Record that ``product_id`` had at most ``available_at_most`` units available just now."""
    window = window_seconds()
    if window <= 0:
        return
    if len(_short) >= MAX_ENTRIES:
        _short.clear()
    _short[product_id] = (clock() + window, max(available_at_most, 0))


def remembers_any() -> bool:
    """Whether this process remembers any product (an expired one too, until a checkout asks about it)."""
    return bool(_short)


def known_short(quantities: Mapping[int, int]) -> list[int]:
    """Products of the cart that were seen short of the asked quantity within the window (ascending ids)."""
    if not _short:
        return []
    now = clock()
    short = []
    for product_id, qty in quantities.items():
        entry = _short.get(product_id)
        if entry is None:
            continue
        until, available_at_most = entry
        if now >= until:
            _short.pop(product_id, None)
        elif available_at_most < qty:
            short.append(product_id)
    return sorted(short)


def forget_all() -> None:
    _short.clear()
