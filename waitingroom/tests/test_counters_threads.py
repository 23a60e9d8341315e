"""A process's queue counters under the threads of one web worker (several requests at once): the threads that find
them old at the same moment read them once, and every thread answers from whole counters and placements.

Threads of one process, each with its own connection, on committed data, released by a barrier, all find the
counters old. Inside the read a second barrier is met only by two reads running at once. Control: with the read
unguarded, reads run at once, and the placements they both extend hold every newly placed pass twice, which the next
read after the admissions cannot drop (KeyError: a poll answered 500)."""

import contextlib
import threading

import pytest
from django.db import connection

from waitingroom import counters, services
from waitingroom.testing import admit_now, queue_product, reset_queue_clock, sale_starts_in

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = 4


def placed_queue(make_customer, make_product) -> int:
    """A queue opened with three passes placed and read by this process, then three more placed that it has not
    read: the next read extends the placements it holds."""
    product = make_product(stock=6)
    queue_product(product, pace=1, starts_in=60)
    for _ in range(3):
        services.queue_join(product_id=product.pk, customer=make_customer())
    sale_starts_in(product, -1)
    reset_queue_clock(product)
    services.queue_advance(product_id=product.pk)  # places the three (the pace admits nobody yet)
    counters.queue_counters_forget()
    assert counters.queue_counters(product_id=product.pk).positioned_through == 3
    for _ in range(3):
        services.queue_join(product_id=product.pk, customer=make_customer())
    services.queue_advance(product_id=product.pk)  # places them behind the three
    counters.queue_counters_forget(placements=False)  # the counters grew old; the placements read stay
    return product.pk


def read_at_once(product_id: int, monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[object]]:
    """THREADS threads ask for the old counters at the same moment: (the reads made, what each thread got). A read
    that has worked out which placements it lacks waits there until a second read has too (they meet only when two
    reads run at once; one read alone goes on after the barrier's timeout)."""
    inside = threading.Barrier(2, timeout=3)
    reads = []
    real_read, real_wanted = counters._counters_read, counters.Placements.wanted

    def counted_read() -> None:
        reads.append(threading.get_ident())
        real_read()

    def meeting_wanted(self, queue_counters):
        wanted = real_wanted(self, queue_counters)
        with contextlib.suppress(threading.BrokenBarrierError):
            inside.wait()
        return wanted

    monkeypatch.setattr(counters, "_counters_read", counted_read)
    monkeypatch.setattr(counters.Placements, "wanted", meeting_wanted)
    start = threading.Barrier(THREADS)
    got: list[object] = [None] * THREADS

    def ask(i: int) -> None:
        try:
            start.wait(timeout=30)
            got[i] = counters.queue_counters(product_id=product_id)
        except Exception as exc:  # what a request would have answered 500 with
            got[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    monkeypatch.setattr(counters, "_counters_read", real_read)
    monkeypatch.setattr(counters.Placements, "wanted", real_wanted)
    return len(reads), got


@pytest.fixture(autouse=True)
def counters_stay_fresh(settings):
    """Counters once read stay fresh through the test (a read held at the barrier is not old when it ends): only
    ``queue_counters_forget`` makes them old."""
    settings.QUEUE_COUNTERS_MAX_AGE_SECONDS = 3600


def test_the_threads_of_a_process_read_the_old_counters_once(make_customer, make_product, monkeypatch):
    product_id = placed_queue(make_customer, make_product)

    reads, got = read_at_once(product_id, monkeypatch)

    assert reads == 1
    assert all(isinstance(c, counters.QueueCounters) and c.positioned_through == 6 for c in got), got
    held = counters._placements[product_id]
    assert sorted(held.positions.values()) == [1, 2, 3, 4, 5, 6]
    assert len(held.in_order) == len(set(held.in_order)) == 6
    admit_now(_product(product_id))
    counters.queue_counters_forget(placements=False)
    assert counters.queue_counters(product_id=product_id).admitted_through == 6  # the admitted are dropped
    assert counters._placements[product_id].positions == {}


def test_control_unguarded_reads_run_at_once_and_hold_passes_twice(make_customer, make_product, monkeypatch):
    product_id = placed_queue(make_customer, make_product)
    monkeypatch.setattr(counters, "_reading", contextlib.nullcontext())

    reads, _ = read_at_once(product_id, monkeypatch)

    assert reads >= 2
    held = counters._placements[product_id]
    assert len(held.in_order) > len(set(held.in_order))  # the passes placed since the last read, twice
    admit_now(_product(product_id))
    counters.queue_counters_forget(placements=False)
    with pytest.raises(KeyError):
        counters.queue_counters(product_id=product_id)


def _product(product_id: int):
    from inventory.models import Product

    return Product.objects.get(pk=product_id)
