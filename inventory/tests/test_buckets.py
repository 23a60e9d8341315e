"""Stock buckets (docs/strategies.md#stock-buckets): a product's units spread over K stock rows.

Checkouts claim a bucket they can lock without waiting (SKIP LOCKED); when the free buckets cannot cover a request
they wait for one bucket, and last they lock every bucket and move units: a product is refused only when it really
lacks the units. Every test here runs on committed data with real threads (own connections, released by a barrier)
where it races, and ends with the audit, which checks every bucket against its own ledger rows and reservations.
The whole race suite also runs against a bucketed product (``RACE_CASES`` in ``checkout.testing``).
"""

import io
import threading

import pytest
from django.core.management import call_command
from django.db import DEFAULT_DB_ALIAS, connection, connections

from checkout import services as checkouts
from checkout.testing import buy_retrying, is_order, place, place_order
from devtools.testing import ThreadRun, act_while_held, assert_invariants, run_concurrently, wait_for_lock_waiters
from inventory import plan, reserve, services
from inventory.admin.product_form import product_version
from inventory.exceptions import StockConflict
from inventory.models import Inventory, Product, StockBucket, StockMovement
from orders import services as order_services
from skincare.errors import InvalidInput, ServiceBusy


def bucket_stock(product):
    return dict(StockBucket.objects.filter(product=product).values_list("bucket", "available_stock"))


def totals(product):
    """The seed's read of the totals: ``inventories`` (a view summing the buckets)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT available_stock, reserved_stock FROM inventories WHERE product_id = %s", [product.pk])
        return cursor.fetchone()


def next_order_id(bucket, buckets):
    """Set the orders' id sequence so that the next order's id is ``bucket`` mod ``buckets``; returns that id."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT COALESCE(max(id), 0) FROM orders")
        (last,) = cursor.fetchone()
        wanted = last + 1 + (bucket - (last + 1)) % buckets
        cursor.execute("SELECT setval(pg_get_serial_sequence('orders', 'id'), %s, false)", [wanted])
    return wanted


def waiting_in_bucket_order():
    """The naive waiting claim: the lowest bucket with the units, whatever the order (every waiter picks the same)."""
    order = "mod(bucket + %(bucket_count)s - mod(%(order_id)s, %(bucket_count)s), %(bucket_count)s)"
    assert order in reserve.CLAIM_WAITING_SQL
    return reserve.CLAIM_WAITING_SQL.replace(order, "bucket")


def hold_buckets(product, buckets, *, release, held):
    """On a connection of its own: lock ``buckets`` of the product (FOR NO KEY UPDATE) until ``release`` is set."""
    conn = connections.create_connection(DEFAULT_DB_ALIAS)
    try:
        conn.set_autocommit(False)
        with conn.cursor() as cursor:
            cursor.execute(
                "SELECT bucket FROM stock_buckets WHERE product_id = %s AND bucket = ANY(%s) FOR NO KEY UPDATE",
                [product.pk, list(buckets)],
            )
            held.set()
            assert release.wait(timeout=60)
        conn.rollback()
    finally:
        conn.close()


# --- setting K -----------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_spreading_and_gathering_keeps_every_unit_and_the_seeds_totals(make_product, customer):
    product = make_product(stock=100)
    reserved = place_order(customer=customer, items=[(product.pk, 3)])

    services.stock_buckets_set(product_id=product.pk, buckets=8)
    assert bucket_stock(product) == {0: 13, 1: 12, 2: 12, 3: 12, 4: 12, 5: 12, 6: 12, 7: 12}  # 97 spread
    assert totals(product) == (97, 3)
    assert StockBucket.objects.get(product=product, bucket=0).reserved_stock == 3  # reservations stay put
    services.stock_buckets_set(product_id=product.pk, buckets=3)
    assert bucket_stock(product) == {0: 33, 1: 32, 2: 32, 3: 0, 4: 0, 5: 0, 6: 0, 7: 0}
    order_services.order_cancel(order_id=reserved.pk)  # its units come back to the bucket that held them
    assert totals(product) == (100, 0)
    assert Product.objects.get(pk=product.pk).stock_buckets == 3
    assert set(StockMovement.objects.filter(product=product).values_list("reason", flat=True)) >= {"rebalance"}
    assert_invariants()


@pytest.mark.django_db
def test_only_guarded_update_products_can_be_bucketed(make_product):
    for strategy in ("row_lock", "row_lock_nowait", "optimistic", "advisory", "serializable"):
        product = make_product(stock=5, strategy=strategy)
        with pytest.raises(InvalidInput, match="guarded_update"):
            services.stock_buckets_set(product_id=product.pk, buckets=4)
        assert Product.objects.get(pk=product.pk).stock_buckets == 1
    with pytest.raises(InvalidInput, match="1 to 64"):
        services.stock_buckets_set(product_id=make_product().pk, buckets=65)


@pytest.mark.django_db
def test_adjust_and_count_work_on_a_bucketed_product(make_product):
    product = make_product(stock=10, buckets=4)
    services.stock_adjust(product_id=product.pk, delta=6, note="delivery")
    assert totals(product) == (16, 0)
    services.stock_adjust(product_id=product.pk, delta=-9, note="damaged")
    assert totals(product) == (7, 0)
    version = Inventory.objects.get(product=product).version
    services.stock_set_counted(product_id=product.pk, counted=20, expected_version=version, note="count")
    assert totals(product) == (20, 0)
    assert min(bucket_stock(product).values()) >= 0
    assert_invariants()


@pytest.mark.django_db
def test_flash_sale_setup_spreads_the_stock_over_the_buckets(make_product):
    call_command("load_demo_data", stdout=io.StringIO())
    out = io.StringIO()
    call_command("flash_sale_setup", "--product", "101", "--stock", "80", "--buckets", "8", stdout=out)
    assert "available=80 reserved=0 buckets=8" in out.getvalue()
    assert sorted(StockBucket.objects.filter(product_id=101).values_list("available_stock", flat=True)) == [10] * 8
    assert_invariants()


# --- the claim and its fallbacks -----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_stock_3_in_8_buckets_and_60_buyers_sell_exactly_3(make_product, make_customer):
    product = make_product(stock=3, buckets=8)
    buyers = [make_customer() for _ in range(60)]

    outcomes = run_concurrently(60, lambda i: buy_retrying(buyers[i], [(product.pk, 1)]))

    assert [o.error for o in outcomes if o.error] == []
    results = [o.value for o in outcomes]
    assert sum(map(is_order, results)) == 3
    assert results.count("conflict") == 57
    assert totals(product) == (0, 3)
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_every_unit_sells_to_buyers_coming_one_at_a_time(make_product, customer, settings):
    """Units scattered one per bucket, buyers of 1 and of 2: the last units sell too (no false sold-out)."""
    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 0
    product = make_product(stock=7, buckets=8)  # buckets hold 1,1,1,1,1,1,1,0
    bought = 0
    for qty in (2, 1, 2, 1, 1):
        place_order(customer=customer, items=[(product.pk, qty)])
        bought += qty
    assert bought == 7 and totals(product) == (0, 7)
    with pytest.raises(StockConflict):
        place_order(customer=customer, items=[(product.pk, 1)])
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_a_checkout_never_waits_while_a_free_bucket_has_the_units(make_product, customer, settings):
    """Seven of eight buckets are held by other transactions: a checkout takes the free one at once (SKIP LOCKED),
    again and again. Its lock timeout is 300 ms, so a claim that waited for a held bucket would be a 503."""
    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 0
    product = make_product(stock=80, buckets=8)
    release, held = threading.Event(), threading.Event()
    holder = threading.Thread(
        target=hold_buckets, args=(product, range(1, 8)), kwargs={"release": release, "held": held}
    )
    holder.start()
    try:
        assert held.wait(timeout=60)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '300ms'")
        orders = [place_order(customer=customer, items=[(product.pk, 1)]) for _ in range(5)]
    finally:
        release.set()
        holder.join(timeout=60)
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
    assert len(orders) == 5
    assert StockBucket.objects.get(product=product, bucket=0).reserved_stock == 5
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_control_a_claim_that_waits_for_a_held_bucket_times_out(make_product, customer, settings, monkeypatch):
    """The same with the claim's SKIP LOCKED removed: it picks a held bucket (7 in 8 each time) and waits for it."""
    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 0
    monkeypatch.setattr(reserve, "CLAIM_BUCKET_SQL", reserve.CLAIM_BUCKET_SQL.replace(" SKIP LOCKED", ""))
    product = make_product(stock=80, buckets=8)
    release, held = threading.Event(), threading.Event()
    holder = threading.Thread(
        target=hold_buckets, args=(product, range(1, 8)), kwargs={"release": release, "held": held}
    )
    holder.start()
    busy = 0
    try:
        assert held.wait(timeout=60)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '300ms'")
        for _ in range(5):
            try:
                place_order(customer=customer, items=[(product.pk, 1)])
            except ServiceBusy:
                busy += 1
    finally:
        release.set()
        holder.join(timeout=60)
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
    assert busy >= 1  # (1/8)^5 that every pick found the free bucket
    assert_invariants()


def queue_eight_buyers(product, buyers):
    """Each of the 8 buckets held by a transaction of its own; 8 buyers (consecutive order ids) start together and
    wait. Returns, per bucket, how many buyers queue for it (pg_blocking_pids: the holder, or the buyer ahead in the
    bucket's queue), after letting everyone go and checking that every buyer bought."""
    releases = [threading.Event() for _ in range(8)]
    helds = [threading.Event() for _ in range(8)]
    pids = [0] * 8

    def hold(bucket):
        conn = connections.create_connection(DEFAULT_DB_ALIAS)
        try:
            conn.set_autocommit(False)
            with conn.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                pids[bucket] = cursor.fetchone()[0]
                cursor.execute(
                    "SELECT 1 FROM stock_buckets WHERE product_id = %s AND bucket = %s FOR NO KEY UPDATE",
                    [product.pk, bucket],
                )
                helds[bucket].set()
                assert releases[bucket].wait(timeout=60)
            conn.rollback()
        finally:
            conn.close()

    holders = [threading.Thread(target=hold, args=(b,)) for b in range(8)]
    for holder in holders:
        holder.start()
    try:
        assert all(held.wait(timeout=60) for held in helds)
        barrier = threading.Barrier(8)

        def buy(i):
            barrier.wait(timeout=60)
            return place_order(customer=buyers[i], items=[(product.pk, 1)])

        runs = [ThreadRun(lambda i=i: buy(i), name=f"buyer-{i}") for i in range(8)]
        blockers = {}
        with connection.cursor() as cursor:
            for pid in wait_for_lock_waiters(8):
                cursor.execute("SELECT pg_blocking_pids(%s)", [pid])
                blockers[pid] = cursor.fetchone()[0]

        def bucket_waited_for(pid):  # a buyer behind another buyer in a bucket's queue waits for that buyer
            holder = next(b for b in blockers[pid] if b in pids or b in blockers)
            return pids.index(holder) if holder in pids else bucket_waited_for(holder)

        per_bucket = [0] * 8
        for pid in blockers:
            per_bucket[bucket_waited_for(pid)] += 1
    finally:
        for release in releases:
            release.set()
        for holder in holders:
            holder.join(timeout=60)
    outcomes = [run.join() for run in runs]
    assert [o.error for o in outcomes if o.error] == []
    return per_bucket


@pytest.mark.django_db(transaction=True)
def test_concurrent_buyers_queue_one_to_a_bucket(make_product, make_customer):
    """Eight buyers while all eight buckets are held: the claim finds no free bucket, and the waiting claims queue
    on the orders' buckets; the orders hold consecutive ids, so each waits for a bucket of its own (N buyers queue
    N/K to a bucket, not on one)."""
    product = make_product(stock=80, buckets=8)
    buyers = [make_customer() for _ in range(8)]

    per_bucket = queue_eight_buyers(product, buyers)

    assert per_bucket == [1] * 8
    assert totals(product) == (72, 8)
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_control_a_waiting_claim_in_bucket_order_queues_every_buyer_on_one_bucket(
    make_product, make_customer, monkeypatch
):
    monkeypatch.setattr(reserve, "CLAIM_WAITING_SQL", waiting_in_bucket_order())
    product = make_product(stock=80, buckets=8)
    buyers = [make_customer() for _ in range(8)]

    per_bucket = queue_eight_buyers(product, buyers)

    assert per_bucket == [8, 0, 0, 0, 0, 0, 0, 0]
    assert totals(product) == (72, 8)


@pytest.mark.django_db(transaction=True)
def test_when_every_bucket_with_units_is_held_the_checkout_waits_and_buys(make_product, customer):
    """The one bucket with stock is held by another transaction: the claim finds no free bucket, the waiting pass
    waits for that bucket, and once it is released the checkout gets the unit (no false sold-out)."""
    product = make_product(stock=1, buckets=4)  # bucket 0 holds the unit
    release, held = threading.Event(), threading.Event()
    holder = threading.Thread(target=hold_buckets, args=(product, [0]), kwargs={"release": release, "held": held})
    holder.start()
    try:
        assert held.wait(timeout=60)
        buying = ThreadRun(lambda: place_order(customer=customer, items=[(product.pk, 1)]), name="buyer")
        wait_for_lock_waiters(1)  # the buyer waits for bucket 0 instead of answering 409
    finally:
        release.set()
        holder.join(timeout=60)
    outcome = buying.join()
    assert outcome.error is None, outcome.error
    assert totals(product) == (0, 1)
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_control_without_the_fallback_a_held_bucket_is_a_false_sold_out(make_product, customer, monkeypatch):
    """The same with the refusal right after the claim (no waiting pass, no full pass): a 409 while the product
    still has its unit."""
    monkeypatch.setattr(plan, "WAITING_PASSES", 0)

    def refuse(line, *, order_id):
        raise StockConflict(product_ids=[line.product_id])

    monkeypatch.setattr(reserve, "_reserve_from_all", refuse)
    product = make_product(stock=1, buckets=4)
    release, held = threading.Event(), threading.Event()
    holder = threading.Thread(target=hold_buckets, args=(product, [0]), kwargs={"release": release, "held": held})
    holder.start()
    try:
        assert held.wait(timeout=60)
        outcome = ThreadRun(lambda: place_order(customer=customer, items=[(product.pk, 1)]), name="buyer").join()
    finally:
        release.set()
        holder.join(timeout=60)
    assert isinstance(outcome.error, StockConflict)
    assert totals(product) == (1, 0)  # the unit was there all along


def buy_while_the_orders_bucket_runs_short(product, customer):
    """Buckets 0 and 1 hold one unit each; an ops adjustment takes bucket 0's unit and holds the product's rows; a
    checkout whose order's bucket is 0 waits for it, and once it waits the adjustment commits. Returns the outcome."""
    next_order_id(0, 2)

    def not_committed_yet():
        assert bucket_stock(product) == {0: 1, 1: 1}

    return act_while_held(
        change=lambda: services.stock_adjust(product_id=product.pk, delta=-1, note="one unit damaged"),
        before_act=not_committed_yet,
        act=lambda: place_order(customer=customer, items=[(product.pk, 1)]),
    )


@pytest.mark.django_db(transaction=True)
def test_when_the_orders_bucket_runs_short_while_it_waits_the_claim_goes_on_to_the_next(make_product, customer):
    product = make_product(stock=2, buckets=2)

    outcome = buy_while_the_orders_bucket_runs_short(product, customer)

    assert outcome.error is None, outcome.error
    assert outcome.value.pk % 2 == 0
    assert StockBucket.objects.get(product=product, bucket=1).reserved_stock == 1  # the next bucket round the ring
    assert totals(product) == (0, 1)
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_control_without_the_fallback_a_bucket_that_ran_short_is_a_false_sold_out(make_product, customer, monkeypatch):
    """The same with the refusal right after the first waiting claim (no second one, no full pass): a 409 while the
    product still has a unit."""
    monkeypatch.setattr(plan, "WAITING_PASSES", 1)

    def refuse(line, *, order_id):
        raise StockConflict(product_ids=[line.product_id])

    monkeypatch.setattr(reserve, "_reserve_from_all", refuse)
    product = make_product(stock=2, buckets=2)

    outcome = buy_while_the_orders_bucket_runs_short(product, customer)

    assert isinstance(outcome.error, StockConflict)
    assert totals(product) == (1, 0)  # the unit was there all along


@pytest.mark.django_db(transaction=True)
def test_a_request_larger_than_any_bucket_moves_units_and_sells(make_product, customer):
    product = make_product(stock=8, buckets=8)  # one unit per bucket

    order = place_order(customer=customer, items=[(product.pk, 5)])

    assert totals(product) == (3, 5)
    held_in = StockMovement.objects.get(order_id=order.pk, reason="reserve").bucket
    assert StockBucket.objects.get(product=product, bucket=held_in).reserved_stock == 5
    # the target bucket's unit plus one from each of four other buckets: five rows, summing to zero
    moved = StockMovement.objects.filter(product=product, reason="rebalance", note="units for a checkout")
    assert moved.count() == 5 and sum(moved.values_list("available_delta", flat=True)) == 0
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_control_without_the_full_pass_a_request_larger_than_any_bucket_is_refused(make_product, customer, monkeypatch):
    def refuse(line, *, order_id):
        raise StockConflict(product_ids=[line.product_id])

    monkeypatch.setattr(reserve, "_reserve_from_all", refuse)
    product = make_product(stock=8, buckets=8)
    with pytest.raises(StockConflict):
        place_order(customer=customer, items=[(product.pk, 5)])
    assert totals(product) == (8, 0)


@pytest.mark.django_db(transaction=True)
def test_changing_k_in_the_middle_of_a_storm_keeps_every_unit(make_product, make_customer):
    product = make_product(stock=40, buckets=4)
    buyers = [make_customer() for _ in range(60)]
    done = threading.Event()

    def flip(i):
        if i == 60:  # one thread changes K while 60 buyers buy
            flips = 0
            for k in (8, 1, 16, 2, 4):
                services.stock_buckets_set(product_id=product.pk, buckets=k)
                flips += 1
            done.set()
            return flips
        return buy_retrying(buyers[i], [(product.pk, 1)])

    outcomes = run_concurrently(61, flip)

    assert [o.error for o in outcomes if o.error] == []
    results = [o.value for o in outcomes[:60]]
    assert sum(map(is_order, results)) == 40
    assert results.count("conflict") == 20
    assert totals(product) == (0, 40)
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_a_multi_item_cart_with_bucketed_products_in_every_order_never_oversells(make_product, make_customer):
    hot = [make_product(stock=10, buckets=8) for _ in range(3)]
    plain = make_product(stock=10)
    buyers = [make_customer() for _ in range(40)]
    carts = [[(p.pk, 1) for p in (hot[i % 3], plain, hot[(i + 1) % 3])] for i in range(40)]

    outcomes = run_concurrently(40, lambda i: buy_retrying(buyers[i], carts[i]))

    assert [o.error for o in outcomes if o.error] == []
    assert sum(map(is_order, (o.value for o in outcomes))) == 10  # the plain product is the limit
    for product in [*hot, plain]:
        available, reserved = totals(product)
        assert available >= 0 and available + reserved == 10
    assert_invariants()


@pytest.mark.django_db
def test_the_checkout_reads_k_and_claims_in_one_statement(make_product, customer):
    """A bucketed product's checkout sends the claim (and its ledger row) as one statement, after the order's."""
    product = make_product(stock=10, buckets=4)
    sent = []

    def record(execute, sql, params, many, context):
        sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        order = place(customer=customer, items=[(product.pk, 1)])
    assert sent.count(reserve.CLAIM_BUCKET_SQL) == 1
    assert sent.index(reserve.CLAIM_BUCKET_SQL) > sent.index(checkouts.ORDER_SQL)
    assert reserve.CLAIM_WAITING_SQL not in sent
    held_in = StockMovement.objects.get(order_id=order.order_id, reason="reserve").bucket
    assert held_in == order.order_id % 4  # the order's own bucket, free


@pytest.mark.django_db
def test_stock_managers_set_the_buckets_in_the_admin(make_product):
    from django.contrib.auth import get_user_model
    from django.test import Client

    from inventory.permissions import ensure_ops_groups

    manager = get_user_model().objects.create_user(username="bucket-manager", password="x" * 20, is_staff=True)
    ensure_ops_groups()["stock_managers"].user_set.add(manager)
    client = Client()
    client.force_login(manager)
    product = make_product(stock=40)

    def save(strategy, buckets):
        return client.post(
            f"/admin/inventory/product/{product.pk}/change/",
            {
                "sku": product.sku,
                "name": product.name,
                "price": "10.00",
                "is_active": "on",
                "inventory_strategy": strategy,
                "stock_buckets": str(buckets),
                "loaded_version": product_version(product.pk),  # the page as loaded
                "inventory-TOTAL_FORMS": "1",
                "inventory-INITIAL_FORMS": "1",
                "inventory-MIN_NUM_FORMS": "0",
                "inventory-MAX_NUM_FORMS": "1",
            },
        )

    assert save("guarded_update", 4).status_code == 302
    assert Product.objects.get(pk=product.pk).stock_buckets == 4
    assert bucket_stock(product) == {0: 10, 1: 10, 2: 10, 3: 10}
    refused = save("row_lock", 4)  # buckets go with guarded_update only: a form error, nothing saved
    assert refused.status_code == 200 and b"guarded_update strategy only" in refused.content
    assert Product.objects.get(pk=product.pk).inventory_strategy == "guarded_update"
    assert save("row_lock", 1).status_code == 302  # back to one row and another strategy in one save
    assert (Product.objects.get(pk=product.pk).stock_buckets, bucket_stock(product)[0]) == (1, 40)
    assert_invariants()
