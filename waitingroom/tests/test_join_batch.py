"""The join answered by the process and written in batches (docs/queue.md#joining), on committed data; each
protection has a control that shows the naive version fails.

* A hundred joins cost the primary at most 0.05 transactions each: the counters read, one block of ids and one
  batch. Control: a join written in its own request costs one each.
* The flush thread writes what its process answered, without a request.
* A worker killed between the answer and its flush: the pass is written at its next poll, with its original arrival
  and draw. Control: a poll that only reads loses it (404).
* One customer, two processes, two passes written at once behind a barrier: one row, at the earlier arrival's
  place (also when the later was written first), and the other pass's poll answers the kept one. Control: a batch
  without the one-pass rule fails whole.
* The arrival instant is the database's clock, whatever the process's own clock says. Control: the process's clock.
* After the opening, passes are placed by arrival, not by id (each process takes its ids in blocks). Control: by id.
"""

import multiprocessing
import os
import signal
import time

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from devtools.testing import Outcome, run_concurrently
from skincare.db import db_now
from waitingroom import counters, joins, passtoken, services
from waitingroom.joins import JOINS, JoinLog
from waitingroom.models import QueuePass
from waitingroom.testing import admit_now, queue_product, reset_queue_clock, sale_starts_in

NEVER_MS = 3_600_000  # a flush interval no test reaches: only the test writes
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.join_batch]


@pytest.fixture(autouse=True)
def _only_the_test_writes(settings):
    """No flush thread writes unless a test says otherwise: each test writes when it means to."""
    settings.QUEUE_JOIN_FLUSH_MS = NEVER_MS


def client_for(customer):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {customer.api_token}")
    return client


def customers(make_customer, n):
    return [make_customer() for _ in range(n)]


def statement(sql):
    """Which statement a captured one is (captured with its parameters bound)."""
    for name, constant in (
        ("counters", counters.QUEUE_COUNTERS_SQL),
        ("ids", joins.ID_BLOCK_SQL),
        ("lock", joins.JOIN_LOCK_SQL),
        ("record", joins.RECORD_SQL),
    ):
        if sql.strip().startswith(constant.strip()[:40]):
            return name
    return sql


def joins_at_the_primary(product, buyers):
    """Join every buyer, then write what this process holds; returns the statements the joins sent (each is a
    transaction of its own) and those of the write (one transaction)."""
    with CaptureQueriesContext(connection) as joining:
        for buyer in buyers:
            services.queue_join(customer=buyer, product_id=product.pk)
    with CaptureQueriesContext(connection) as writing:
        JOINS.flush()
    return [q["sql"] for q in joining], [q["sql"] for q in writing]


def test_a_hundred_joins_cost_the_primary_at_most_five_transactions(make_customer, make_product, settings):
    product = make_product(stock=50)
    queue_product(product, starts_in=60)
    buyers = customers(make_customer, 100)

    joining, writing = joins_at_the_primary(product, buyers)

    assert [statement(sql) for sql in joining] == ["counters", "ids"]
    assert [statement(sql) for sql in writing] == ["BEGIN", "lock", "record", "COMMIT"]
    assert (len(joining) + 1) / 100 <= 0.05  # the batch's statements are one transaction
    rows = list(QueuePass.objects.filter(product=product).order_by("joined_at").values_list("customer_id", "early"))
    assert rows == [(b.pk, True) for b in buyers]  # every one, in the order answered, before the opening


def test_control_a_join_written_in_its_own_request_costs_a_transaction(make_customer, make_product, settings):
    settings.QUEUE_JOIN_FLUSH_MS = 0
    product = make_product(stock=50)
    queue_product(product, starts_in=60)

    joining, _writing = joins_at_the_primary(product, customers(make_customer, 100))

    assert [statement(sql) for sql in joining].count("record") == 100


def test_the_flush_thread_writes_what_its_process_answered(make_customer, make_product, settings):
    settings.QUEUE_JOIN_FLUSH_MS = 50
    product = make_product(stock=50)
    queue_product(product, starts_in=60)
    buyers = customers(make_customer, 20)

    for buyer in buyers:
        services.queue_join(customer=buyer, product_id=product.pk)
    while JOINS.pending():
        assert JOINS.written.wait(timeout=30), "the flush thread wrote nothing"
        JOINS.written.clear()

    assert QueuePass.objects.filter(product=product).count() == 20


def _join_and_die(pipe, customer_id, token, product_id):
    """A web worker that answers one join and is killed before its flush."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    answer = client.post(f"/v1/products/{product_id}/queue")
    body = answer.json()
    pipe.send((answer.status_code, body["poll_url"], body["pass_token"], JOINS.pending()))
    os.kill(os.getpid(), signal.SIGKILL)


def joined_by_a_killed_worker(customer, product):
    JOINS.forget()
    connections.close_all()  # the child opens its own
    ours, theirs = multiprocessing.get_context("fork").Pipe()
    worker = multiprocessing.get_context("fork").Process(
        target=_join_and_die, args=(theirs, customer.pk, customer.api_token, product.pk)
    )
    worker.start()
    status, url, token, pending = ours.recv()
    worker.join(timeout=60)
    assert (status, pending, worker.exitcode) == (201, 1, -signal.SIGKILL)
    assert not QueuePass.objects.filter(product=product).exists()  # answered, never written
    return url, token


def test_a_join_whose_worker_died_before_its_flush_is_written_at_its_next_poll(customer, make_product, settings):
    product = make_product(stock=5)
    queue_product(product, starts_in=-1)
    url, token = joined_by_a_killed_worker(customer, product)
    signed = passtoken._unsign(token)

    answer = client_for(customer).get(url, HTTP_QUEUE_PASS=token)

    assert (answer.status_code, answer.json()["pass_id"], answer.json()["state"]) == (200, signed.pass_id, "waiting")
    row = QueuePass.objects.get(product=product)
    assert row.pk == signed.pass_id
    assert round(row.joined_at.timestamp() * 1_000_000) == signed.joined_us  # its original arrival
    assert row.draw == joins.pass_draw(pass_id=signed.pass_id, queue_created_us=signed.queue_created_us)
    admit_now(product)
    assert client_for(customer).get(url, HTTP_QUEUE_PASS=token).json()["state"] == "admitted"


def test_control_a_poll_that_only_reads_loses_the_join(customer, make_product, settings, monkeypatch):
    monkeypatch.setattr(services, "queue_pass_recover", lambda *, signed: None)
    product = make_product(stock=5)
    queue_product(product, starts_in=-1)
    url, token = joined_by_a_killed_worker(customer, product)

    assert client_for(customer).get(url, HTTP_QUEUE_PASS=token).status_code == 404


def two_processes_one_customer(customer, make_customer, product, *, later_written_first=False):
    """Processes ``first`` and ``second`` each answer the customer (``first`` earlier) and two other buyers; both
    write at once, released by a barrier (or ``second`` before ``first``). Returns both signed passes and how each
    write ended."""
    found = counters.queue_counters(product_id=product.pk)
    first, second = JoinLog(), JoinLog()
    early, _ = first.issue(product_id=product.pk, customer_id=customer.pk, counters=found)
    late, _ = second.issue(product_id=product.pk, customer_id=customer.pk, counters=found)
    assert early.joined_us < late.joined_us
    for log in (first, second):
        log.issue(product_id=product.pk, customer_id=make_customer().pk, counters=found)
    try:
        if later_written_first:
            outcomes = [Outcome(0, value=second.flush()), Outcome(1, value=first.flush())]
        else:
            outcomes = run_concurrently(2, lambda i: (second, first)[i].flush())
    finally:
        first.forget()
        second.forget()
    return early, late, outcomes


def test_one_customers_passes_from_two_processes_keep_one_place_the_earlier(customer, make_customer, make_product):
    product = make_product(stock=5)
    queue_product(product, starts_in=-1)

    early, late, outcomes = two_processes_one_customer(customer, make_customer, product)

    assert [o.error for o in outcomes] == [None, None]
    assert QueuePass.objects.filter(product=product).count() == 3  # the customer's one and the two other buyers'
    kept = QueuePass.objects.get(product=product, customer=customer)
    assert round(kept.joined_at.timestamp() * 1_000_000) == early.joined_us  # the earlier arrival's place
    client = client_for(customer)
    for signed in (early, late):  # each poll answers the kept pass, the other with a new signed pass for it
        answer = client.get(f"/v1/queue/passes/{signed.pass_id}", HTTP_QUEUE_PASS=passtoken.pass_sign(signed))
        assert (answer.status_code, answer.json()["pass_id"]) == (200, kept.pk)
    assert QueuePass.objects.filter(product=product).count() == 3  # polling wrote no second pass


def test_the_earlier_arrival_keeps_its_place_when_the_later_pass_was_written_first(
    customer, make_customer, make_product
):
    product = make_product(stock=5)
    queue_product(product, starts_in=-1)

    early, late, _outcomes = two_processes_one_customer(customer, make_customer, product, later_written_first=True)

    kept = QueuePass.objects.get(product=product, customer=customer)
    assert kept.pk == late.pass_id  # the row written first stays
    assert round(kept.joined_at.timestamp() * 1_000_000) == early.joined_us  # at the earlier arrival's place
    assert kept.draw == joins.pass_draw(pass_id=early.pass_id, queue_created_us=early.queue_created_us)


def test_control_a_batch_without_the_one_pass_rule_fails_whole(customer, make_customer, make_product, monkeypatch):
    conflict = joins.RECORD_SQL.index("ON CONFLICT")
    monkeypatch.setattr(joins, "RECORD_SQL", joins.RECORD_SQL[:conflict])
    product = make_product(stock=5)
    queue_product(product, starts_in=-1)

    _early, _late, outcomes = two_processes_one_customer(customer, make_customer, product)

    assert len([o for o in outcomes if o.error is not None]) == 1  # a unique violation: the other buyer's pass too
    assert QueuePass.objects.filter(product=product).count() == 2


def arrival_with_a_skewed_process_clock(customer, product, monkeypatch):
    """Join while this process's own clock is an hour fast; returns the database's now before and after the join,
    the pass's recorded arrival, and the bound the process knows its offset within."""
    real = time.time
    before = db_now()
    counters.queue_counters(product_id=product.pk)  # the offset learned at a counters read, as any process does
    monkeypatch.setattr(time, "time", lambda: real() + 3600)
    try:
        services.queue_join(customer=customer, product_id=product.pk)
    finally:
        monkeypatch.setattr(time, "time", real)
    after = db_now()
    error = counters.queue_counters(product_id=product.pk).read_error
    return before, QueuePass.objects.get(product=product, customer=customer).joined_at, after, error


def test_the_arrival_is_the_databases_clock_whatever_the_processs_own(customer, make_product, monkeypatch, settings):
    settings.QUEUE_JOIN_FLUSH_MS = 0
    product = make_product(stock=5)
    queue_product(product, starts_in=-1)

    before, joined_at, after, error = arrival_with_a_skewed_process_clock(customer, product, monkeypatch)

    assert before.timestamp() - error <= joined_at.timestamp() <= after.timestamp() + error


def test_control_an_arrival_by_the_processs_clock_is_an_hour_off(customer, make_product, monkeypatch, settings):
    settings.QUEUE_JOIN_FLUSH_MS = 0
    monkeypatch.setattr(joins, "arrival_us", lambda counters: round(time.time() * 1_000_000))
    product = make_product(stock=5)
    queue_product(product, starts_in=-1)

    _before, joined_at, after, _error = arrival_with_a_skewed_process_clock(customer, product, monkeypatch)

    assert joined_at.timestamp() > after.timestamp() + 3000


def placed_across_two_id_blocks(make_customer, product):
    """Process ``low`` takes its block of ids first, ``high`` after it; ``high`` answers a buyer first, ``low`` one
    after. Returns the two buyers' positions (the earlier arrival's first)."""
    found = counters.queue_counters(product_id=product.pk)
    low, high = JoinLog(), JoinLog()
    scout = make_customer()
    low.issue(product_id=product.pk, customer_id=scout.pk, counters=found)  # takes the lower block
    earlier, later = make_customer(), make_customer()
    first, _ = high.issue(product_id=product.pk, customer_id=earlier.pk, counters=found)
    second, _ = low.issue(product_id=product.pk, customer_id=later.pk, counters=found)
    assert first.pass_id > second.pass_id and first.joined_us < second.joined_us
    low.flush()
    high.flush()
    low.forget()
    high.forget()
    reset_queue_clock(product)
    services.queue_advance(product_id=product.pk)
    positions = dict(QueuePass.objects.filter(product=product).values_list("customer_id", "position"))
    return positions[earlier.pk], positions[later.pk]


def test_after_the_opening_passes_are_placed_by_arrival_not_by_id(make_customer, make_product):
    product = make_product(stock=5)
    queue_product(product, starts_in=-1)

    earlier, later = placed_across_two_id_blocks(make_customer, product)

    assert earlier < later


def test_control_placed_by_id_the_later_arrival_goes_first(make_customer, make_product, monkeypatch):
    assert services.PLACE_SQL.count("qp.joined_at, qp.id") == 1
    monkeypatch.setattr(services, "PLACE_SQL", services.PLACE_SQL.replace("qp.joined_at, qp.id", "qp.id"))
    product = make_product(stock=5)
    queue_product(product, starts_in=-1)

    earlier, later = placed_across_two_id_blocks(make_customer, product)

    assert earlier > later


def test_a_pass_answered_before_a_reset_is_not_written_into_the_new_queue(customer, make_product, settings):
    product = make_product(stock=5)
    queue_product(product, starts_in=60)
    _view, created = services.queue_join(customer=customer, product_id=product.pk)
    assert created
    services.queue_reset(product_id=product.pk, admit_per_second=10)

    assert JOINS.flush() == 1
    assert not QueuePass.objects.filter(product=product).exists()  # its poll says queue_pass_outdated
    sale_starts_in(product, 60)  # a fresh read of the counters: the new queue
    _view, created = services.queue_join(customer=customer, product_id=product.pk)
    assert created  # a new pass, of the new queue
    assert JOINS.flush() == 1 and QueuePass.objects.filter(product=product).count() == 1
