"""The sale board's reads (docs/runbooks/sale.md). One refresh is :data:`REFRESH_STATEMENTS` (8)
statements, one read-only REPEATABLE READ transaction (one snapshot, one database clock), however many products it
shows: ``BEGIN``, ``SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY``, five SELECTs
(:data:`LEDGER_CUTOFF_SQL` with the clock, :data:`PRODUCTS_SQL`, :data:`SERIES_SQL`, :data:`SWEEPER_LAG_SQL`, and
the waiting room's ``QUEUE_STATES_SQL`` for every product on the board at once), ``COMMIT``. Inside a caller's
transaction it runs the five SELECTs alone, on the caller's snapshot. This instance's checkout counters come from
:func:`backoffice.opsmetrics.checkout_snapshot` (no statement). Nothing here writes, and nothing takes a row lock:
plain SELECTs take only ACCESS SHARE table locks, which conflict with no lock a checkout, a payment or the sweeper
takes.

Where each number comes from:

- window state and countdown: ``products.sale_starts_at`` / ``sale_ends_at`` against the transaction's ``now()``;
- available / reserved (total and per stock bucket): ``stock_buckets`` (summed by ``inventory.selectors.STOCK_SUM_SQL``);
- sold: the stock ledger's ``consume`` rows of the product (units paid for) since its window opened (without an
  open window: over the charts' span), so a refresh reads this sale's rows, never the product's whole history;
- orders created / paid / expired / cancelled per second: the ledger rows of the last ``SERIES_SECONDS``
  (``reserve`` = an order created with this product, ``consume`` = paid, ``expire`` = swept or paid late,
  ``cancel`` = cancelled), found from the newest ledger row backwards so the read costs what the window holds;
- units held by unpaid orders and the next expiries: ``active`` reservations of the product by ``expires_at``;
- sweeper lag: how far ``now()`` is past the oldest ``active`` reservation's ``expires_at`` (0 when none is due);
- orders to reconcile: the orders the sweeper expired without the gateway's word
  (``payments.reporting.TO_RECONCILE_SQL``, the sale report's same definition), read by the sweeper-lag statement;
- unmatched payments: money a gateway reported for a transaction the shop did not issue, not yet resolved by ops
  (``payments.reporting.UNMATCHED_OPEN_SQL``), read by the same statement;
- refusals by code and checkout p50/p99: this instance's Prometheus counters (not in the database);
- the waiting room: the product's queue (:func:`waitingroom.selectors.queue_states`), None without one.
"""

import time
from collections import defaultdict
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.urls import reverse

from backoffice import opsmetrics
from inventory.models import StockMovement
from inventory.selectors import SALE_STATE_SQL, STOCK_SUM_SQL
from orders.models import ReservationStatus
from payments.reporting import TO_RECONCILE_SQL, UNMATCHED_OPEN_SQL
from waitingroom.selectors import QueueState, queue_states

# Status and reason values come from the TextChoices, interpolated once when this module loads.
ACTIVE = ReservationStatus.ACTIVE.value
RESERVE, CONSUME = StockMovement.Reason.RESERVE.value, StockMovement.Reason.CONSUME.value
EXPIRE, CANCEL = StockMovement.Reason.EXPIRE.value, StockMovement.Reason.CANCEL.value

SERIES_SECONDS = 300  # the charts' span
NEAR_BEFORE_SECONDS = 6 * 3600  # a window opening within this is "near"
NEAR_AFTER_SECONDS = 1800  # a window closed less than this ago is still shown
MAX_PRODUCTS = 12
NEXT_EXPIRIES = 5

REFRESH_STATEMENTS = 8  # BEGIN, SET TRANSACTION, the five SELECTs, COMMIT (the module's docstring)

# The id of the newest ledger row older than the charts' span: a backward scan of the primary key that stops at
# the first such row, so it reads only the rows inside the span. (Rows carry their transaction's now(); a ledger
# row committed more than SERIES_SECONDS after its transaction began could be missed: checkouts take milliseconds.)
# With it, the snapshot's clock.
LEDGER_CUTOFF_SQL = """
    SELECT COALESCE((SELECT id FROM stock_movements WHERE created_at < now() - make_interval(secs => %(span)s)
                     ORDER BY id DESC LIMIT 1), 0),
           now(), extract(epoch FROM now())::float8
"""

PRODUCTS_SQL = f"""
    SELECT p.id, p.sku, p.name, p.price::text, p.sale_price::text, p.stock_buckets, p.inventory_strategy,
           p.sale_starts_at, p.sale_ends_at,
           COALESCE({SALE_STATE_SQL}, 'no_window') AS window_state,
           extract(epoch FROM p.sale_starts_at - now())::float8 AS seconds_to_start,
           extract(epoch FROM p.sale_ends_at - now())::float8 AS seconds_to_end,
           stock.available_stock, stock.reserved_stock,
           p.sale_starts_at IS NOT NULL AND p.sale_starts_at <= now() AS sold_since_opening,
           (SELECT COALESCE(-SUM(m.reserved_delta), 0) FROM stock_movements m
             WHERE m.product_id = p.id AND m.id > since.ledger_id AND m.reason = '{CONSUME}') AS sold,
           (SELECT json_agg(json_build_array(b.bucket, b.available_stock, b.reserved_stock) ORDER BY b.bucket)
              FROM stock_buckets b WHERE b.product_id = p.id) AS buckets,
           (SELECT json_agg(json_build_array(e.seconds_left, e.units, e.orders) ORDER BY e.seconds_left)
              FROM (SELECT extract(epoch FROM date_trunc('second', r.expires_at) - now())::float8 AS seconds_left,
                           SUM(r.qty) AS units, count(*) AS orders
                      FROM inventory_reservations r
                     WHERE r.product_id = p.id AND r.status = '{ACTIVE}'
                     GROUP BY date_trunc('second', r.expires_at) ORDER BY 1 LIMIT %(next_expiries)s) e) AS next_expiries
      FROM products p
      {STOCK_SUM_SQL}
      -- The product's newest ledger row from before its window opened (no window, or not open yet: before the
      -- charts' span): "sold" adds up only this sale's rows, walking the (product_id, id) index backwards.
      CROSS JOIN LATERAL (
           SELECT COALESCE((SELECT m.id FROM stock_movements m
                             WHERE m.product_id = p.id
                               AND m.created_at < CASE WHEN p.sale_starts_at <= now() THEN p.sale_starts_at
                                                       ELSE now() - make_interval(secs => %(span)s) END
                             ORDER BY m.product_id DESC, m.id DESC LIMIT 1), 0) AS ledger_id) since
     WHERE p.id = ANY(%(pinned)s)
        OR (p.is_active AND (
               ((p.sale_starts_at IS NOT NULL OR p.sale_ends_at IS NOT NULL)
                AND (p.sale_starts_at IS NULL OR p.sale_starts_at <= now() + make_interval(secs => %(near_before)s))
                AND (p.sale_ends_at IS NULL OR p.sale_ends_at >= now() - make_interval(secs => %(near_after)s)))
            OR stock.reserved_stock > 0
            OR p.id IN (SELECT m.product_id FROM stock_movements m WHERE m.id > %(cutoff)s AND m.reason = '{RESERVE}')))
     ORDER BY p.id
     LIMIT %(max_products)s
"""

SERIES_SQL = f"""
    SELECT m.product_id, floor(extract(epoch FROM m.created_at))::bigint AS second, m.reason,
           count(DISTINCT m.order_id) AS orders, SUM(-m.available_delta - m.reserved_delta) AS units
      FROM stock_movements m
     WHERE m.id > %(cutoff)s AND m.product_id = ANY(%(ids)s)
       AND m.created_at >= now() - make_interval(secs => %(span)s)
       AND m.reason IN ('{RESERVE}', '{CONSUME}', '{EXPIRE}', '{CANCEL}')
     GROUP BY 1, 2, 3
"""

# With it, the orders to reconcile and the unmatched payments (more columns, not more statements).
SWEEPER_LAG_SQL = f"""
    SELECT count(*), COALESCE(extract(epoch FROM now() - min(expires_at))::float8, 0),
           (SELECT count(*) FROM ({TO_RECONCILE_SQL}) r), (SELECT count(*) FROM ({UNMATCHED_OPEN_SQL}) u)
      FROM inventory_reservations WHERE status = '{ACTIVE}' AND expires_at <= now()
"""


def board(*, pinned: list[int] | None = None) -> dict[str, Any]:
    """Everything one refresh of the sale board shows, as JSON-ready values (one snapshot: the module's docstring)."""
    started = time.perf_counter()
    snapshot = _read_snapshot(pinned=list(pinned or []))
    first_second = int(snapshot["now_epoch"]) - SERIES_SECONDS + 1
    series_rows = defaultdict(list)
    for product_id, second, reason, orders, units in snapshot["series"]:
        series_rows[product_id].append((second - first_second, reason, orders, units))
    queues = {state.product_id: state for state in snapshot["queues"]}
    overdue_count, overdue_seconds, to_reconcile, unmatched = snapshot["sweeper_lag"]
    return {
        "now": snapshot["now"].isoformat(),
        "now_epoch": snapshot["now_epoch"],
        "series": {"first_second": first_second, "seconds": SERIES_SECONDS},
        "products": [_product(row, series_rows[row["id"]], queues.get(row["id"])) for row in snapshot["products"]],
        "sweeper": {
            "overdue_reservations": overdue_count,
            "lag_seconds": round(overdue_seconds, 3),
            "orders_to_reconcile": to_reconcile,
            "unmatched_payments": unmatched,
        },
        "checkout": opsmetrics.checkout_snapshot(),
        "refresh_ms": round(1000 * (time.perf_counter() - started), 2),
    }


def _read_snapshot(*, pinned: list[int]) -> dict[str, Any]:
    """The rows of one refresh: every statement of it, in one REPEATABLE READ READ ONLY transaction (inside a
    caller's transaction, on the caller's snapshot)."""
    params: dict[str, Any] = {
        "span": SERIES_SECONDS,
        "near_before": NEAR_BEFORE_SECONDS,
        "near_after": NEAR_AFTER_SECONDS,
        "max_products": MAX_PRODUCTS,
        "next_expiries": NEXT_EXPIRIES,
        "pinned": pinned,
    }
    outermost = not connection.in_atomic_block
    with transaction.atomic(), connection.cursor() as cursor:
        if outermost:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        cursor.execute(LEDGER_CUTOFF_SQL, params)
        params["cutoff"], now, now_epoch = cursor.fetchone()
        cursor.execute(PRODUCTS_SQL, params)
        columns = [c.name for c in cursor.description]
        products = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
        params["ids"] = [row["id"] for row in products]
        cursor.execute(SERIES_SQL, params)
        series = cursor.fetchall()
        cursor.execute(SWEEPER_LAG_SQL)
        sweeper_lag = cursor.fetchone()
        queues = queue_states(product_ids=params["ids"])
    return {
        "now": now,
        "now_epoch": now_epoch,
        "products": products,
        "series": series,
        "sweeper_lag": sweeper_lag,
        "queues": queues,
    }


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def _product(
    row: dict[str, Any], series_rows: list[tuple[int, str, int, int]], queue: QueueState | None
) -> dict[str, Any]:
    """One product's card; ``series_rows`` are its (index in the charts' span, reason, orders, units)."""
    orders: dict[str, list[int]] = {r: [0] * SERIES_SECONDS for r in (RESERVE, CONSUME, EXPIRE, CANCEL)}
    units = {r: [0] * SERIES_SECONDS for r in orders}
    for index, reason, order_count, unit_count in series_rows:
        if 0 <= index < SERIES_SECONDS:
            orders[reason][index] = order_count
            units[reason][index] = abs(unit_count or 0)
    return {
        "id": row["id"],
        "sku": row["sku"],
        "name": row["name"],
        "price": row["price"],
        "sale_price": row["sale_price"],
        "strategy": row["inventory_strategy"],
        "window": {
            "state": row["window_state"],
            "starts_at": _iso(row["sale_starts_at"]),
            "ends_at": _iso(row["sale_ends_at"]),
            "seconds_to_start": row["seconds_to_start"],
            "seconds_to_end": row["seconds_to_end"],
        },
        "available": row["available_stock"],
        "reserved": row["reserved_stock"],
        "sold": int(row["sold"]),
        "sold_since": "opening" if row["sold_since_opening"] else "span",
        "buckets": [
            {"bucket": b, "available": a, "reserved": r}
            for b, a, r in (row["buckets"] or [])
            if b < row["stock_buckets"] or a or r
        ],
        "held": {
            "units": row["reserved_stock"],
            "next_expiries": [
                {"in_seconds": round(s, 1), "units": int(u), "orders": int(o)}
                for s, u, o in (row["next_expiries"] or [])
            ],
        },
        "per_second": {
            "orders_created": orders[RESERVE],
            "orders_paid": orders[CONSUME],
            "orders_expired": orders[EXPIRE],
            "orders_cancelled": orders[CANCEL],
            "units_reserved": units[RESERVE],
        },
        "queue": None if queue is None else _queue(queue),
    }


def _queue(state: QueueState) -> dict[str, Any]:
    """The product's waiting room: its passes by state, its pace, and where ops pause or resume it (the queue's
    admin page)."""
    return {
        "waiting": state.waiting,
        "admitted": state.admitted,
        "expired": state.expired,
        "admitted_per_second": state.admit_per_second,
        "paused": state.paused,
        "pause_url": reverse("admin:waitingroom_productqueue_change", args=[state.product_id]),
    }
