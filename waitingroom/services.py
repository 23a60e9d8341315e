"""The waiting room's writes: joining a queue, advancing admissions, and ops' queue settings (docs/queue.md).

* :func:`queue_join` — answered by the process from its queue counters, written in batches (``waitingroom.joins``);
  one pass per (product, customer): concurrent joins of one customer in one process make one pass (one 201, the
  rest 200 with the same pass), and across processes the unique constraint keeps one.
* :func:`queue_advance` — run by the sweeper loop (``expire_reservations --loop`` calls :func:`queues_advance`) for every open queue, each in
  its own short transaction that takes the queue's row ``FOR NO KEY UPDATE SKIP LOCKED`` (another sweeper skips it,
  never waits): it places the passes that have no position yet (:data:`PLACE_SQL`: everyone who joined before the
  opening in the order of their random draw, then the others by arrival) and admits the next ones in position
  order, as many as the pace has earned since the last advance (paused time earns nothing) and never more than the
  units available minus the admissions still outstanding.
* ``queue_set`` / ``queue_reset`` / ``queue_remove`` / ``queue_pause`` — the admin's and ``flash_sale_setup
  --queue``'s changes (``backoffice.sale_setup``); a reset or removal excludes joins for its transaction.

Lock order (docs/locking.md): a ``product_queues`` row, then ``queue_passes`` rows of waiting passes; a checkout
takes only its customer's own admitted pass (``waitingroom.admission``), a row the advancer never updates.
"""

import logging
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction

from inventory.exceptions import ProductNotFound, SaleEnded
from inventory.selectors import SALE_ENDED, SALE_STATE_SQL, STOCK_SUM_SQL
from skincare.db import retry_transient
from skincare.errors import InvalidInput
from skincare.locks import advisory_key
from waitingroom import metrics, selectors
from waitingroom.counters import queue_counters, queue_counters_forget
from waitingroom.exceptions import QueueNotFound, QueueNotOpen, QueueSoldOut
from waitingroom.joins import JOINS, pass_record
from waitingroom.passtoken import SignedPass
from waitingroom.selectors import PassView

logger = logging.getLogger(__name__)

# Whether a customer may join, asked of the database only when this process's counters know no queue of the product
# (none, or created since they were read): the product exists and is for sale, has a queue, the queue is open for
# joining (QUEUE_OPENS_BEFORE_SECONDS before sale_starts_at), the sale has not ended, a unit is available or reserved.
JOIN_CHECK_SQL = f"""
SELECT q.product_id IS NOT NULL AS queued, {SALE_STATE_SQL} AS sale,
       p.sale_starts_at - make_interval(secs => %(opens_before)s) AS opens_at,
       CASE WHEN p.sale_starts_at - make_interval(secs => %(opens_before)s) > now()
            THEN extract(epoch FROM p.sale_starts_at - make_interval(secs => %(opens_before)s) - now()) END,
       COALESCE(stock.available_stock, 0), COALESCE(stock.reserved_stock, 0)
FROM products p
LEFT JOIN product_queues q ON q.product_id = p.id
{STOCK_SUM_SQL}
WHERE p.id = %(product_id)s AND p.is_active
"""


def queue_join(*, customer: User, product_id: int) -> tuple[PassView, bool]:
    """The customer's pass for the product, and whether it was created now (201) or this process answered it before
    (200). Decided from this process's queue counters, without a transaction of its own; the pass is written with
    its batch (``waitingroom.joins``).

    Refusals write nothing: ProductNotFound (404), QueueNotFound (404: the product sells without a queue),
    QueueNotOpen (409, with ``opens_at`` and Retry-After), SaleEnded (410), QueueSoldOut (409: nothing available
    and nothing reserved). A customer's second join in another process is answered a new pass; one of the two is
    kept (the earlier arrival's place), and the other's first poll through the database answers the kept one."""
    counters = queue_counters(product_id=product_id)
    if counters is None:
        _join_refusal(product_id)  # raises, unless the queue was created since this process read its counters
        queue_counters_forget(placements=False)
        counters = queue_counters(product_id=product_id)
        if counters is None:
            raise QueueNotFound(product_id=product_id)
    if not counters.is_active:
        raise ProductNotFound(product_id=product_id)
    if counters.sale_ended():
        raise SaleEnded(product_ids=[product_id])
    now = counters.db_now()
    if counters.sale_starts_at is not None:
        opens_at = counters.sale_starts_at - settings.QUEUE_OPENS_BEFORE_SECONDS
        if opens_at > now:
            raise QueueNotOpen(
                product_id=product_id,
                opens_at=datetime.fromtimestamp(opens_at, tz=UTC),
                retry_after_seconds=max(1, math.ceil(opens_at - now)),
            )
    signed = JOINS.issued(product_id=product_id, customer_id=customer.pk, queue_created_us=counters.created_us)
    if signed is not None:  # joined before in this process: the pass as a poll would see it
        return selectors.pass_poll(signed=signed) or selectors.pass_view_joined(signed=signed, counters=counters), False
    if counters.sold_out():
        raise QueueSoldOut(product_id=product_id)
    signed, created = JOINS.issue(product_id=product_id, customer_id=customer.pk, counters=counters)
    if created:
        metrics.QUEUE_JOINS.inc()
    return selectors.pass_view_joined(signed=signed, counters=counters), created


def _join_refusal(product_id: int) -> None:
    """Why a product this process's counters know no queue of cannot be joined (raised); returns when the database
    says it can (its queue was created since the counters were read)."""
    with connection.cursor() as cursor:
        cursor.execute(JOIN_CHECK_SQL, {"product_id": product_id, "opens_before": settings.QUEUE_OPENS_BEFORE_SECONDS})
        row = cursor.fetchone()
    if row is None:
        raise ProductNotFound(product_id=product_id)
    queued, sale, opens_at, seconds_to_open, available, reserved = row
    if not queued:
        raise QueueNotFound(product_id=product_id)
    if sale == SALE_ENDED:
        raise SaleEnded(product_ids=[product_id])
    if seconds_to_open is not None:
        raise QueueNotOpen(
            product_id=product_id, opens_at=opens_at, retry_after_seconds=max(1, math.ceil(seconds_to_open))
        )
    if available <= 0 and reserved <= 0:
        raise QueueSoldOut(product_id=product_id)


@retry_transient
def queue_pass_recover(*, signed: SignedPass) -> PassView | None:
    """A poll through the database of a signed pass it lacks: the pass is written from its signed copy (its process
    died before writing it), and the customer's pass of the product is answered: this one, or the one kept instead
    (the customer joined in another process too). None: the pass cannot be written (a pass signed before joins were
    batched, or of a queue that is gone)."""
    if signed.joined_us is None or signed.queue_created_us is None:
        return None
    pass_record(signed=signed)
    return selectors.pass_get(customer_id=signed.customer_id, product_id=signed.product_id)


# --- Advancing admissions --------------------------------------------------------------------------------------

# The queue's row, locked for this advance; another advancer (a second sweeper) skips it instead of waiting.
LOCK_QUEUE_SQL = f"""
SELECT q.admit_per_second, q.paused, q.credit, q.credited_at, q.positioned_through, q.admitted_through,
       p.sale_starts_at, now(), {SALE_STATE_SQL} AS sale
FROM product_queues q JOIN products p ON p.id = q.product_id
WHERE q.product_id = %(product_id)s
FOR NO KEY UPDATE OF q SKIP LOCKED
"""

# Positions for the passes that have none, after the last one given: first everyone who joined before the opening,
# in the order of their random draw (a uniformly random order, drawn by the database at the join: arriving early
# is enough, arriving first gives no edge), then everyone who joined after it, by arrival (``joined_at``, the
# database's clock as each web process knows it: docs/queue.md#joining).
PLACE_SQL = """
WITH unplaced AS (
    SELECT qp.id, row_number() OVER (ORDER BY NOT qp.early, CASE WHEN qp.early THEN qp.draw END, qp.joined_at, qp.id) AS rn
      FROM queue_passes qp
     WHERE qp.product_id = %(product_id)s AND qp.position IS NULL
)
UPDATE queue_passes qp SET position = %(through)s + unplaced.rn
  FROM unplaced WHERE qp.id = unplaced.id
RETURNING qp.position
"""

# What caps the admissions: the product's available units and the admissions still outstanding.
ADMISSION_CAP_SQL = f"""
SELECT COALESCE(stock.available_stock, 0),
       (SELECT count(*) FROM queue_passes
         WHERE product_id = %(product_id)s AND admitted_at IS NOT NULL AND used_at IS NULL AND admitted_until > now())
FROM products p
{STOCK_SUM_SQL}
WHERE p.id = %(product_id)s
"""

# The next ``n`` placed passes, in position order, admitted until now() + ADMISSION_TTL_SECONDS.
ADMIT_SQL = """
UPDATE queue_passes SET admitted_at = now(), admitted_until = now() + make_interval(secs => %(ttl)s)
 WHERE id IN (SELECT id FROM queue_passes
               WHERE product_id = %(product_id)s AND position > %(through)s
               ORDER BY position LIMIT %(n)s)
RETURNING position
"""

SAVE_QUEUE_SQL = """
UPDATE product_queues SET credit = %(credit)s, credited_at = now(), positioned_through = %(placed)s,
       admitted_through = %(admitted)s
 WHERE product_id = %(product_id)s
"""


def earned_credit(*, credit: float, pace: int, paused: bool, elapsed_seconds: float) -> float:
    """The admissions the pace has earned: ``pace`` per second of unpaused time since the last advance, on top of
    what was left, at most QUEUE_MAX_BURST_SECONDS of pace (at least 1), so a long stop does not pile up a burst."""
    if paused:
        return credit
    cap = max(1.0, pace * settings.QUEUE_MAX_BURST_SECONDS)
    return min(cap, credit + pace * max(0.0, elapsed_seconds))


@dataclass
class AdvanceCounts:
    """What one advance of a queue did: passes placed in line, passes admitted."""

    placed: int = 0
    admitted: int = 0


@retry_transient
@transaction.atomic
def queue_advance(*, product_id: int) -> AdvanceCounts:
    """Place and admit the next passes of one queue (see the module's docstring). A queue another advancer holds,
    one whose sale has not opened or has ended, and a paused one admit nobody (a paused one earns no credit)."""
    with connection.cursor() as cursor:
        cursor.execute(LOCK_QUEUE_SQL, {"product_id": product_id})
        row = cursor.fetchone()
        if row is None:
            return AdvanceCounts()
        pace, paused, credit, credited_at, placed_through, admitted_through, starts_at, now, sale = row
        if (starts_at is not None and now < starts_at) or sale == SALE_ENDED:
            return AdvanceCounts()
        cursor.execute(PLACE_SQL, {"product_id": product_id, "through": placed_through})
        placed = [position for (position,) in cursor.fetchall()]
        since = max(t for t in (credited_at, starts_at) if t is not None) if (credited_at or starts_at) else now
        credit = earned_credit(credit=credit, pace=pace, paused=paused, elapsed_seconds=(now - since).total_seconds())
        cursor.execute(ADMISSION_CAP_SQL, {"product_id": product_id})
        available, outstanding = cursor.fetchone()
        n = 0 if paused else max(0, min(math.floor(credit), available - outstanding))
        admitted: list[int] = []
        if n:
            cursor.execute(
                ADMIT_SQL,
                {"product_id": product_id, "through": admitted_through, "n": n, "ttl": settings.ADMISSION_TTL_SECONDS},
            )
            admitted = [position for (position,) in cursor.fetchall()]
        cursor.execute(
            SAVE_QUEUE_SQL,
            {
                "product_id": product_id,
                "credit": credit - len(admitted),
                "placed": max(placed, default=placed_through),
                "admitted": max(admitted, default=admitted_through),
            },
        )
    if admitted:
        metrics.QUEUE_ADMISSIONS.inc(len(admitted))
    return AdvanceCounts(placed=len(placed), admitted=len(admitted))


# Queues whose sale is open (or has no start): the ones an advance can move.
OPEN_QUEUES_SQL = f"""
SELECT q.product_id FROM product_queues q JOIN products p ON p.id = q.product_id
 WHERE (p.sale_starts_at IS NULL OR p.sale_starts_at <= now()) AND ({SALE_STATE_SQL}) IS DISTINCT FROM '{SALE_ENDED}'
 ORDER BY q.product_id
"""


def queues_advance() -> int:
    """Advance every open queue, each in its own transaction (the sweeper loop runs this every interval);
    returns the admissions granted."""
    with connection.cursor() as cursor:
        cursor.execute(OPEN_QUEUES_SQL)
        product_ids = [pid for (pid,) in cursor.fetchall()]
    return sum(queue_advance(product_id=pid).admitted for pid in product_ids)


# --- Ops: a product's queue -------------------------------------------------------------------------------------

UPSERT_QUEUE_SQL = """
INSERT INTO product_queues (product_id, admit_per_second, paused, credit, positioned_through, admitted_through,
                            created_at)
VALUES (%(product_id)s, %(pace)s, false, 0, 0, 0, now())
ON CONFLICT (product_id) DO UPDATE SET admit_per_second = EXCLUDED.admit_per_second
"""


def queue_pace_check(*, admit_per_second: int) -> None:
    """At least 1 a second; with a gateway's payment pages, at most their pace (PAYMENT_SESSIONS_PER_SECOND: each
    admitted buyer asks for one page, and pages must keep up with admissions; start-up holds the default pace to
    the same bound, payments.E014)."""
    if admit_per_second < 1:
        raise InvalidInput(
            "The pace must be at least 1 admission per second.", fields={"admit_per_second": ["at least 1"]}
        )
    pages = settings.PAYMENT_SESSIONS_PER_SECOND
    if settings.PAYMENT_GATEWAY != "sandbox" and pages and admit_per_second > pages:
        raise InvalidInput(
            f"The pace must not exceed the payment pages' ({pages} a second, PAYMENT_SESSIONS_PER_SECOND).",
            fields={"admit_per_second": [f"at most {pages}"]},
        )


@transaction.atomic
def queue_set(*, product_id: int, admit_per_second: int | None = None) -> None:
    """Make the product's checkout require an admission, at ``admit_per_second`` (QUEUE_ADMIT_PER_SECOND by
    default), or change the pace of its queue (from the next advance on)."""
    pace = settings.QUEUE_ADMIT_PER_SECOND if admit_per_second is None else admit_per_second
    queue_pace_check(admit_per_second=pace)
    if not _product_exists(product_id):
        raise ProductNotFound(product_id=product_id)
    with connection.cursor() as cursor:
        cursor.execute(UPSERT_QUEUE_SQL, {"product_id": product_id, "pace": pace})


# A fresh queue: the pace given, every counter back to zero, not paused (the row kept if there was one).
RESET_QUEUE_SQL = """
INSERT INTO product_queues (product_id, admit_per_second, paused, credit, positioned_through, admitted_through,
                            created_at)
VALUES (%(product_id)s, %(pace)s, false, 0, 0, 0, now())
ON CONFLICT (product_id) DO UPDATE SET admit_per_second = EXCLUDED.admit_per_second, paused = false, credit = 0,
       credited_at = NULL, positioned_through = 0, admitted_through = 0, created_at = now()
"""


# Re-creating or removing a queue holds its key exclusive; a batch of joins holds it shared
# (``waitingroom.joins.JOIN_LOCK_SQL``): a batch is written entirely before or entirely after.
RESET_LOCK_SQL = "SELECT pg_advisory_xact_lock(%(key)s)"


def _queue_clear(cursor: Any, product_id: int) -> int:
    """Take the queue exclusively (no join under way, none until commit), then its row (waiting for an advance
    under way: the advancer's order, row then passes, so the two cannot deadlock), and delete its passes."""
    cursor.execute(RESET_LOCK_SQL, {"key": advisory_key("product_queue", product_id)})
    cursor.execute("SELECT 1 FROM product_queues WHERE product_id = %s FOR UPDATE", [product_id])
    cursor.execute("DELETE FROM queue_passes WHERE product_id = %s", [product_id])
    return cursor.rowcount


@transaction.atomic
def queue_remove(*, product_id: int) -> int:
    """The product sells without a queue again; its passes are deleted. Returns how many. One transaction a join
    cannot interleave with (:data:`JOIN_LOCK_SQL`)."""
    with connection.cursor() as cursor:
        deleted = _queue_clear(cursor, product_id)
        cursor.execute("DELETE FROM product_queues WHERE product_id = %s", [product_id])
    return deleted


@transaction.atomic
def queue_reset(*, product_id: int, admit_per_second: int | None = None) -> int:
    """A fresh queue for the product (a new sale): the earlier passes deleted and every counter at zero, at
    ``admit_per_second`` (QUEUE_ADMIT_PER_SECOND by default), in one transaction a join cannot interleave with (a
    join's pass is deleted with the old queue or belongs to the new one). Returns the passes deleted."""
    pace = settings.QUEUE_ADMIT_PER_SECOND if admit_per_second is None else admit_per_second
    queue_pace_check(admit_per_second=pace)
    if not _product_exists(product_id):
        raise ProductNotFound(product_id=product_id)
    with connection.cursor() as cursor:
        deleted = _queue_clear(cursor, product_id)
        cursor.execute(RESET_QUEUE_SQL, {"product_id": product_id, "pace": pace})
    return deleted


@transaction.atomic
def queue_pause(*, product_id: int, paused: bool) -> None:
    """Pause or resume admission. Either way the credit clock restarts now, so paused time earns nothing."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE product_queues SET paused = %s, credited_at = now() WHERE product_id = %s", [paused, product_id]
        )
        if cursor.rowcount == 0:
            raise QueueNotFound(product_id=product_id)


def _product_exists(product_id: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM products WHERE id = %s", [product_id])
        return cursor.fetchone() is not None
