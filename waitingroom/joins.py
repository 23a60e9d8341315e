"""A join answered by the web process, recorded in batches (docs/queue.md#joining).

The crowd's first second is joins, so a join costs the primary no transaction of its own. The process decides it from
what it already holds: the queue's counters (``waitingroom.counters``: open for joining, sale window, stock; read at
most once per QUEUE_COUNTERS_MAX_AGE_SECONDS per process) and the database's clock they carry. The answer is a signed
pass (``waitingroom.passtoken``) with:

* an id from a block of the ``queue_passes`` id sequence this process took ahead (:data:`ID_BLOCK` ids per
  statement);
* the arrival instant on the database's clock: this process's offset from the database's ``now()``, learned at each
  counters read, within half that read's round trip (:attr:`QueueCounters.read_error`);
* no draw: the pre-opening draw is a keyed hash of the pass (:func:`pass_draw`), which nobody can predict or choose
  and anyone holding the key can compute again.

The process keeps the passes it answered in a :class:`JoinLog` and writes them in one multi-row statement
(:data:`RECORD_SQL`) every QUEUE_JOIN_FLUSH_MS, from a thread of its own (0: each join is written at once, in its
request). A pass the database lacks (the process died before its flush) is written from the signed pass at its next
poll through the database (:func:`pass_record`), with its original arrival and draw. Writing a pass again is harmless:
the one-pass rule (the ``(product, customer)`` unique constraint) decides, and of two passes of one customer the place
kept is the earlier arrival's.
"""

import atexit
import logging
import os
import threading
from dataclasses import dataclass

from django.conf import settings
from django.db import connection, transaction
from django.utils.crypto import salted_hmac

from skincare.locks import advisory_key
from waitingroom.counters import QueueCounters
from waitingroom.passtoken import SignedPass

logger = logging.getLogger(__name__)

# Pass ids taken from the sequence per statement: one statement per ID_BLOCK joins of a process. Ids are unique, not
# an arrival order (arrival is ``joined_at``).
ID_BLOCK = 200
ID_BLOCK_SQL = "SELECT nextval(pg_get_serial_sequence('queue_passes', 'id')) FROM generate_series(1, %(n)s)"

# The queues a batch joins, held shared for its transaction in ascending order: a reset or removal of a queue
# (``waitingroom.services._queue_clear``, which holds the key exclusive) runs wholly before or after a batch.
JOIN_LOCK_SQL = "SELECT pg_advisory_xact_lock_shared(k) FROM unnest(%(keys)s::bigint[]) AS k ORDER BY k"

# A batch of passes, one statement. A pass whose queue is no longer the one it joined (reset or re-created since) is
# not written: its poll says queue_pass_outdated. ``early`` compares the arrival with the sale's start. The one-pass
# rule: a customer's second pass of the product is not written, except that an earlier arrival moves the kept pass's
# place (its arrival, early and draw) to the earlier one while it is not placed yet.
RECORD_SQL = """
INSERT INTO queue_passes (id, product_id, customer_id, early, draw, joined_at)
SELECT j.id, j.product_id, j.customer_id, COALESCE(to_timestamp(j.joined_us / 1e6) < p.sale_starts_at, false),
       j.draw, to_timestamp(j.joined_us / 1e6)
  FROM unnest(%(ids)s::bigint[], %(product_ids)s::bigint[], %(customer_ids)s::bigint[], %(joined_us)s::bigint[],
              %(draws)s::float8[], %(queues_us)s::bigint[]) AS j(id, product_id, customer_id, joined_us, draw, queue_us)
  JOIN product_queues q ON q.product_id = j.product_id
                       AND (extract(epoch FROM q.created_at) * 1000000)::bigint = j.queue_us
  JOIN products p ON p.id = j.product_id
ON CONFLICT (product_id, customer_id) DO UPDATE
   SET early = EXCLUDED.early, draw = EXCLUDED.draw, joined_at = EXCLUDED.joined_at
 WHERE EXCLUDED.joined_at < queue_passes.joined_at AND queue_passes.position IS NULL
"""


def pass_draw(*, pass_id: int, queue_created_us: int) -> float:
    """The pass's place in the pre-opening shuffle, in [0, 1): a keyed hash (SECRET_KEY) of the pass and its queue.
    Nobody without the key can predict it, and nobody can choose it (the id is the sequence's)."""
    digest = salted_hmac("waitingroom.draw", f"{queue_created_us}:{pass_id}", algorithm="sha256").digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def arrival_us(counters: QueueCounters) -> int:
    """Now on the database's clock, in whole microseconds, from the counters' offset."""
    return round(counters.db_now() * 1_000_000)


@dataclass(frozen=True, slots=True)
class Joined:
    """A pass this process answered, to be written."""

    pass_id: int
    product_id: int
    customer_id: int
    joined_us: int
    queue_created_us: int

    @classmethod
    def from_signed(cls, signed: SignedPass) -> "Joined":
        assert signed.joined_us is not None and signed.queue_created_us is not None
        return cls(signed.pass_id, signed.product_id, signed.customer_id, signed.joined_us, signed.queue_created_us)


def passes_write(joined: list["Joined"]) -> None:
    """Write ``joined`` in one transaction: the queues' keys shared, then :data:`RECORD_SQL`. Uses this thread's
    connection."""
    earliest: dict[tuple[int, int], Joined] = {}
    for j in joined:  # one row per (product, customer) per statement (ON CONFLICT affects a row once)
        key = (j.product_id, j.customer_id)
        if key not in earliest or j.joined_us < earliest[key].joined_us:
            earliest[key] = j
    rows = list(earliest.values())
    with transaction.atomic(), connection.cursor() as cursor:
        keys = sorted({advisory_key("product_queue", j.product_id) for j in rows})
        cursor.execute(JOIN_LOCK_SQL, {"keys": keys})
        cursor.execute(
            RECORD_SQL,
            {
                "ids": [j.pass_id for j in rows],
                "product_ids": [j.product_id for j in rows],
                "customer_ids": [j.customer_id for j in rows],
                "joined_us": [j.joined_us for j in rows],
                "draws": [pass_draw(pass_id=j.pass_id, queue_created_us=j.queue_created_us) for j in rows],
                "queues_us": [j.queue_created_us for j in rows],
            },
        )


def pass_record(*, signed: SignedPass) -> None:
    """Write a signed pass the database lacks (its process died before its flush), with its original arrival and
    draw: at its poll, in its own transaction."""
    passes_write([Joined.from_signed(signed)])


# The most passes a process remembers having answered (for a second join of the same customer in the same process):
# then forgotten all at once, as the verified tokens are (waitingroom.passtoken).
ISSUED_HELD = 50_000


class JoinLog:
    """One process's joins: the ids it holds, the passes it answered (so a customer's second join in the process gets
    the same pass) and those not written yet, and the thread that writes them every QUEUE_JOIN_FLUSH_MS."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: list[int] = []
        self._issued: dict[tuple[int, int, int], SignedPass] = {}
        self._pending: list[Joined] = []
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._thread_pid: int | None = None
        # Set after each flush that wrote passes (tests wait on it).
        self.written = threading.Event()

    def issued(self, *, product_id: int, customer_id: int, queue_created_us: int) -> SignedPass | None:
        return self._issued.get((product_id, customer_id, queue_created_us))

    def issue(self, *, product_id: int, customer_id: int, counters: QueueCounters) -> tuple[SignedPass, bool]:
        """The customer's pass of this queue from this process: the one it answered before (False), or a new one
        (True), kept to be written."""
        key = (product_id, customer_id, counters.created_us)
        with self._lock:
            signed = self._issued.get(key)
            if signed is not None:
                return signed, False
            if not self._ids:
                self._ids = self._id_block()
            signed = SignedPass(
                pass_id=self._ids.pop(),
                product_id=product_id,
                customer_id=customer_id,
                position=None,
                queue_created_us=counters.created_us,
                joined_us=arrival_us(counters),
            )
            if len(self._issued) >= ISSUED_HELD:
                self._issued.clear()
            self._issued[key] = signed
            self._pending.append(Joined.from_signed(signed))
        if settings.QUEUE_JOIN_FLUSH_MS == 0:
            self.flush()
        else:
            self._ensure_thread()
        return signed, True

    @staticmethod
    def _id_block() -> list[int]:
        with connection.cursor() as cursor:
            cursor.execute(ID_BLOCK_SQL, {"n": ID_BLOCK})
            return [pass_id for (pass_id,) in reversed(cursor.fetchall())]

    def pending(self) -> int:
        return len(self._pending)

    def flush(self) -> int:
        """Write every pass not written yet, in one statement (this thread's connection); returns how many. On an
        error they stay pending for the next flush, and the error is raised."""
        with self._lock:
            batch, self._pending = self._pending, []
        if not batch:
            return 0
        try:
            passes_write(batch)
        except BaseException:
            with self._lock:
                self._pending[:0] = batch
            raise
        self.written.set()
        return len(batch)

    def _ensure_thread(self) -> None:
        if self._thread_pid == os.getpid():
            return
        with self._lock:
            if self._thread_pid == os.getpid():  # started by another thread meanwhile
                return
            self._thread_pid = os.getpid()
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="queue-join-flush", daemon=True)
            self._thread.start()
            atexit.register(self._flush_at_exit)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._wake.wait(timeout=settings.QUEUE_JOIN_FLUSH_MS / 1000 or None)
                self._wake.clear()
                try:
                    self.flush()
                except Exception:
                    logger.exception("queue joins not written; kept for the next flush")
                    connection.close()
                connection.close_if_unusable_or_obsolete()
        finally:
            connection.close()

    def _flush_at_exit(self) -> None:
        try:
            self.flush()
        except Exception:
            logger.exception("queue joins not written at exit; each is written at its pass's next poll")

    def forget(self) -> None:
        """Drop what this process holds and stop its thread (tests): ids, answered passes, pending ones."""
        thread = self._thread
        if thread is not None and self._thread_pid == os.getpid():
            self._stop.set()
            self._wake.set()
            thread.join(timeout=60)
        with self._lock:
            self._ids, self._issued, self._pending = [], {}, []
            self._thread, self._thread_pid = None, None
        self.written.clear()


JOINS = JoinLog()
