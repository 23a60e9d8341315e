"""Per-product inventory strategies (docs/strategies.md): each one's own proof, the cart rule, a switch in the
middle of a storm, and the admin switch visibly changing how a checkout locks.

The shared race suite (checkout/tests/test_checkout_race.py, test_checkout_http_race.py, test_webhook_races.py,
the sweeper storms) runs against every strategy as well.
"""

import logging
import random
import threading

import psycopg
import pytest
from django.db import connection
from django.test import Client

from checkout.testing import STRATEGIES, buy_retrying, is_order, place_order
from devtools.testing import ThreadRun, assert_invariants, run_concurrently
from inventory import reserve
from inventory.admin.product_form import product_version
from inventory.exceptions import LockBusy, StockConflict
from inventory.models import Inventory, InventoryStrategy, Product
from inventory.permissions import ensure_ops_groups
from orders.models import Order

S = InventoryStrategy


def conninfo():
    """A libpq connection string for a second, independent connection to the test database."""
    params = connection.get_connection_params()
    keys = ("dbname", "user", "host", "port", "password")
    return " ".join(f"{k}={params[k]}" for k in keys if params.get(k))


def is_reserve(sql):
    """The reserve statement on bucket 0 (plain or at a version), as ``inventory.reserve`` sends it."""
    return sql in (reserve.RESERVE_SQL, reserve.RESERVE_AT_VERSION_SQL)


PRODUCT_KEY_LOCK = "SELECT pg_advisory_xact_lock(%s)"  # skincare.locks.advisory_xact_lock, one key per statement


def statements_of_one_checkout(customer, product):
    """The SQL one checkout sends, and the isolation level its guarded UPDATE ran at."""
    sent, isolation = [], []

    def record(execute, sql, params, many, context):
        sent.append(sql)
        result = execute(sql, params, many, context)
        if is_reserve(sql):
            # on a cursor of its own: the reserve statement's answer (the bucket taken) is still to be read
            isolation.append(context["cursor"].connection.execute("SHOW transaction_isolation").fetchone()[0])
        return result

    with connection.execute_wrapper(record):
        order = place_order(customer=customer, items=[(product.pk, 1)])
    return order, sent, isolation[-1]


@pytest.mark.django_db(transaction=True)  # SERIALIZABLE needs the checkout to be the outermost transaction
def test_changing_the_strategy_in_the_admin_changes_how_checkouts_lock(make_product, customer, settings):
    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 0  # setup: one customer checks out once per strategy
    manager = Client()
    user = ensure_ops_groups()["stock_managers"].user_set.model.objects.create_user(
        username="strategy-manager", password="x" * 20, is_staff=True
    )
    ensure_ops_groups()["stock_managers"].user_set.add(user)
    manager.force_login(user)
    product = make_product(stock=50)

    seen = {}
    for strategy in STRATEGIES:
        response = manager.post(
            f"/admin/inventory/product/{product.pk}/change/",
            {
                "sku": product.sku,
                "name": product.name,
                "price": "10.00",
                "is_active": "on",
                "inventory_strategy": strategy,
                "stock_buckets": "1",
                "loaded_version": product_version(product.pk),  # the page as loaded
                "inventory-TOTAL_FORMS": "1",
                "inventory-INITIAL_FORMS": "1",
                "inventory-MIN_NUM_FORMS": "0",
                "inventory-MAX_NUM_FORMS": "1",
            },
        )
        assert response.status_code == 302, response.content[:2000]
        assert Product.objects.get(pk=product.pk).inventory_strategy == strategy
        _order, sent, isolation = statements_of_one_checkout(customer, product)
        seen[strategy] = (" ".join(sent), isolation)

    def has(strategy, text):
        return text in seen[strategy][0]

    assert all(has(s, "AND available_stock >= %(qty)s") for s in STRATEGIES)  # every strategy ends with the guard
    assert not has(S.GUARDED_UPDATE, "FOR NO KEY UPDATE") and not has(S.GUARDED_UPDATE, PRODUCT_KEY_LOCK)
    assert has(S.ROW_LOCK, "FOR NO KEY UPDATE") and not has(S.ROW_LOCK, "NOWAIT")
    assert has(S.ROW_LOCK_NOWAIT, "FOR NO KEY UPDATE NOWAIT")
    assert has(S.OPTIMISTIC, "AND version = %(version)s")
    assert has(S.ADVISORY, PRODUCT_KEY_LOCK)
    assert {s: iso for s, (_sql, iso) in seen.items()} == {
        **dict.fromkeys(STRATEGIES, "read committed"),
        S.SERIALIZABLE: "serializable",
    }
    assert Product.objects.get(pk=product.pk).inventory_strategy == S.SERIALIZABLE
    assert_invariants()


@pytest.mark.django_db
def test_the_strategy_and_buckets_stay_in_the_admin_not_the_public_api(client, make_product):
    """Ops internals: the public product API shows what a shopper needs; the admin lists the strategy."""
    product = make_product(stock=1, strategy=S.ADVISORY)
    shown = client.get(f"/v1/products/{product.pk}").json()
    assert shown["id"] == product.pk and shown["available_stock"] == 1
    assert "inventory_strategy" not in shown and "stock_buckets" not in shown
    listed = client.get("/v1/products").json()["products"]
    assert all("inventory_strategy" not in p and "stock_buckets" not in p for p in listed)
    from inventory.admin.products import ProductAdmin

    assert {"inventory_strategy", "stock_buckets"} <= set(ProductAdmin.list_display)


def hold_inventory_row(product):
    """Another connection holds the product's stock row (bucket 0) (FOR NO KEY UPDATE) until the returned event is set."""
    held, release = threading.Event(), threading.Event()

    def hold_row():
        with psycopg.connect(conninfo()) as other:
            other.execute(
                "SELECT 1 FROM stock_buckets WHERE bucket = 0 AND product_id = %s FOR NO KEY UPDATE", [product.pk]
            )
            held.set()
            assert release.wait(timeout=60)

    holder = ThreadRun(hold_row)
    assert held.wait(timeout=30)
    return holder, release


@pytest.mark.django_db(transaction=True)
def test_nowait_answers_lock_busy_at_once_while_the_row_is_held(make_product, api):
    product = make_product(stock=5, strategy=S.ROW_LOCK_NOWAIT)
    holder, release = hold_inventory_row(product)

    def buy_without_a_lock_timeout():
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = 0")  # a checkout that waited for the row would wait until released
        try:
            return api.post("/v1/checkout", {"items": [{"product_id": product.pk, "qty": 1}]}, format="json")
        finally:
            connection.close()

    try:
        outcome = ThreadRun(buy_without_a_lock_timeout).join(timeout=20)  # NOWAIT answers at once
    finally:
        release.set()
    assert holder.join().error is None
    assert outcome.error is None, repr(outcome.error)
    response = outcome.value

    assert response.status_code == 409
    assert response.json()["code"] == "lock_busy"
    assert response["Retry-After"] == "1"
    assert Order.objects.count() == 0  # nothing written
    assert Inventory.objects.get(pk=product.pk).available_stock == 5
    again = api.post("/v1/checkout", {"items": [{"product_id": product.pk, "qty": 1}]}, format="json")
    assert again.status_code == 201  # the row is free again
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_control_a_waiting_row_lock_waits_instead_of_answering_busy(make_product, customer, settings):
    """The same held row with ``row_lock``: the checkout waits its turn (here until the lock timeout)."""
    product = make_product(stock=5, strategy=S.ROW_LOCK)
    holder, release = hold_inventory_row(product)

    def buy_with_short_lock_timeout():
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = 200")
        try:
            return place_order(customer=customer, items=[(product.pk, 1)])
        finally:
            connection.close()

    buyer = ThreadRun(buy_with_short_lock_timeout)
    outcome = buyer.join()
    release.set()
    assert holder.join().error is None
    assert type(outcome.error).__name__ == "ServiceBusy"  # it waited the lock timeout out: never lock_busy
    assert not isinstance(outcome.error, LockBusy)


@pytest.mark.django_db(transaction=True)
def test_optimistic_gives_up_after_its_bound_when_the_version_keeps_changing(make_product, customer, settings):
    settings.INVENTORY_OPTIMISTIC_ATTEMPTS = 3
    product = make_product(stock=5, strategy=S.OPTIMISTIC)
    attempts = []

    def someone_else_changes_the_row_first(execute, sql, params, many, context):
        if is_reserve(sql):
            attempts.append(1)
            with psycopg.connect(conninfo(), autocommit=True) as other:  # commits before our UPDATE runs
                other.execute(
                    "UPDATE stock_buckets SET version = version + 1 WHERE bucket = 0 AND product_id = %s", [product.pk]
                )
        return execute(sql, params, many, context)

    with connection.execute_wrapper(someone_else_changes_the_row_first), pytest.raises(StockConflict) as refused:
        place_order(customer=customer, items=[(product.pk, 1)])

    assert len(attempts) == 3
    assert refused.value.data() == {"product_ids": [product.pk], "gave_up_after": 3}
    assert Order.objects.count() == 0
    assert Inventory.objects.get(pk=product.pk).available_stock == 5
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_optimistic_succeeds_once_the_version_holds(make_product, customer, settings):
    settings.INVENTORY_OPTIMISTIC_ATTEMPTS = 3
    product = make_product(stock=5, strategy=S.OPTIMISTIC)
    attempts = []

    def change_the_row_once(execute, sql, params, many, context):
        if is_reserve(sql):
            attempts.append(1)
            if len(attempts) == 1:
                with psycopg.connect(conninfo(), autocommit=True) as other:
                    other.execute(
                        "UPDATE stock_buckets SET version = version + 1 WHERE bucket = 0 AND product_id = %s",
                        [product.pk],
                    )
        return execute(sql, params, many, context)

    with connection.execute_wrapper(change_the_row_once):
        order = place_order(customer=customer, items=[(product.pk, 1)])

    assert is_order(order) and len(attempts) == 2
    assert Inventory.objects.get(pk=product.pk).reserved_stock == 1
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_serializable_retries_a_failure_raised_at_commit(make_product, customer, caplog):
    """A SERIALIZABLE checkout whose statements all succeed but whose COMMIT fails (40001: another serializable
    transaction read what it wrote and wrote what it read, and committed first) is run again from the start."""
    product = make_product(stock=5, strategy=S.SERIALIZABLE)
    caplog.set_level(logging.INFO, logger="skincare.db")
    updated, other_committed = threading.Event(), threading.Event()
    update_rowcounts = []

    def pause_after_the_first_update(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if is_reserve(sql):
            update_rowcounts.append(context["cursor"].rowcount)
            if len(update_rowcounts) == 1:
                updated.set()
                assert other_committed.wait(timeout=60)
        return result

    def checkout():
        with connection.execute_wrapper(pause_after_the_first_update):
            return place_order(customer=customer, items=[(product.pk, 1)])

    buyer = ThreadRun(checkout)
    assert updated.wait(timeout=60)
    with psycopg.connect(conninfo()) as other:  # a serializable transaction that forms a cycle with the checkout
        other.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
        other.execute("SELECT available_stock FROM inventories WHERE product_id = %s", [product.pk])
        other.execute("UPDATE products SET name = name || ' (renamed)' WHERE id = %s", [product.pk])
        other.commit()
    other_committed.set()
    outcome = buyer.join()

    assert outcome.error is None, repr(outcome.error)
    assert is_order(outcome.value)
    assert update_rowcounts == [1, 1]  # the first attempt's UPDATE succeeded: it was the COMMIT that failed
    assert any("retrying after 40001" in r.getMessage() for r in caplog.records if r.name == "skincare.db")
    assert Order.objects.count() == 1
    assert Product.objects.get(pk=product.pk).name.endswith("(renamed)")
    assert Inventory.objects.get(pk=product.pk).reserved_stock == 1
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_switching_strategies_in_the_middle_of_a_storm_sells_exactly_the_stock(make_product, make_customer):
    stock, buyers_count = 12, 48
    product = make_product(stock=stock)
    buyers = [make_customer() for _ in range(buyers_count)]
    finished, finished_lock, done = [0], threading.Lock(), threading.Event()

    def work(i):
        if i == 0:  # the ops person flipping the strategy in the admin, again and again
            flips = 0
            while not done.is_set() or flips < len(STRATEGIES):
                Product.objects.filter(pk=product.pk).update(inventory_strategy=STRATEGIES[flips % len(STRATEGIES)])
                flips += 1
            return flips
        try:
            return buy_retrying(buyers[i - 1], [(product.pk, 1)], retry_gave_up=True)
        finally:
            with finished_lock:
                finished[0] += 1
                if finished[0] == buyers_count:
                    done.set()

    outcomes = run_concurrently(buyers_count + 1, work)

    assert [o.error for o in outcomes if o.error] == []
    assert outcomes[0].value >= len(STRATEGIES)
    results = [o.value for o in outcomes[1:]]
    assert sum(is_order(r) for r in results) == stock
    assert results.count("conflict") == buyers_count - stock
    inventory = Inventory.objects.get(pk=product.pk)
    assert (inventory.available_stock, inventory.reserved_stock) == (0, stock)
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_carts_mixing_every_strategy_never_deadlock_and_conserve_units(make_product, make_customer, caplog):
    """The cart rule: advisory keys first (ascending), then every row FOR NO KEY UPDATE in ascending id (NOWAIT
    when any product is row_lock_nowait), then the guarded updates; SERIALIZABLE when any product is."""
    products = [make_product(stock=30, strategy=s) for s in STRATEGIES]
    ids = [p.pk for p in products]
    buyers = [make_customer() for _ in range(36)]
    rng = random.Random(99)
    carts = []
    for _ in buyers:
        chosen = rng.sample(ids, rng.randint(2, 4))
        rng.shuffle(chosen)
        carts.append([(pid, rng.randint(1, 2)) for pid in chosen])

    outcomes = run_concurrently(36, lambda i: buy_retrying(buyers[i], carts[i], retry_gave_up=True))

    assert [o.error for o in outcomes if o.error] == []
    reserved = dict.fromkeys(ids, 0)
    for o in outcomes:
        if is_order(o.value):
            for pid, qty in carts[o.index]:
                reserved[pid] += qty
    for pid in ids:
        inventory = Inventory.objects.get(product_id=pid)
        assert inventory.reserved_stock == reserved[pid]
        assert inventory.available_stock + inventory.reserved_stock == 30
    log = [r.getMessage() for r in caplog.records if r.name == "skincare.db"]
    assert not [line for line in log if "40P01" in line]  # serialization retries are allowed; deadlocks never
    assert_invariants()


@pytest.mark.django_db
def test_a_cart_takes_advisory_keys_before_row_locks_in_ascending_order(make_product, customer):
    low_rows, advisory_high = make_product(stock=5, strategy=S.ROW_LOCK), make_product(stock=5, strategy=S.ADVISORY)
    sent = []

    def record(execute, sql, params, many, context):
        sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        place_order(customer=customer, items=[(advisory_high.pk, 1), (low_rows.pk, 1)])

    advisory = next(i for i, sql in enumerate(sent) if sql == PRODUCT_KEY_LOCK)
    row_locks = next(i for i, sql in enumerate(sent) if "FOR NO KEY UPDATE" in sql)
    updates = [i for i, sql in enumerate(sent) if is_reserve(sql)]
    assert advisory < row_locks < updates[0]
    assert len(updates) == 2
