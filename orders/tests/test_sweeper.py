"""The reservation sweep (``orders.services.orders_expire_due``, run by ``manage.py expire_reservations``): several
copies at once over thousands of due orders while customers keep checking out, its report and exit codes. The
command as a process and its ``--loop``: backoffice/tests/test_sweeper_loop.py."""

import io
import os
import random
import re
import sys
import threading
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction

from checkout.testing import RACE_CASES, buy_retrying, place_order
from devtools.testing import assert_invariants, run_concurrently
from inventory.models import Inventory, StockMovement
from orders.models import Order, Reservation
from skincare.errors import ServiceBusy

pytestmark = pytest.mark.django_db(transaction=True)

BASE_DIR = Path(__file__).resolve().parents[2]
REPORT = re.compile(
    r"expire_reservations: (?P<orders>\d+) orders cancelled \(payment_timeout\), "
    r"(?P<reservations>\d+) reservations expired, (?P<units>\d+) units returned in (?P<batches>\d+) batches; "
    r"due when started: (?P<due>\d+), oldest overdue (?P<overdue>[\d.]+)s"
)


def report(text):
    """Parse every sweep line of the command's output."""
    found = [
        {k: float(v) if k == "overdue" else int(v) for k, v in m.groupdict().items()} for m in REPORT.finditer(text)
    ]
    assert found, f"no sweep report in {text!r}"
    return found


def due_orders(settings, customer, carts):
    """Check out each cart with a zero TTL: by the database clock the orders are due the moment they commit."""
    settings.RESERVATION_TTL_SECONDS = 0
    try:
        return [place_order(customer=customer, items=cart) for cart in carts]
    finally:
        settings.RESERVATION_TTL_SECONDS = 1800


def expire_rows_per_reservation():
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT r.order_id, r.product_id, r.qty, COUNT(m.id), COALESCE(SUM(m.available_delta), 0),
                   COALESCE(SUM(m.reserved_delta), 0)
            FROM inventory_reservations r
            LEFT JOIN stock_movements m
                   ON m.order_id = r.order_id AND m.product_id = r.product_id AND m.reason = 'expire'
            GROUP BY r.id
            """
        )
        return {(order_id, pid): (qty, n, avail, res) for order_id, pid, qty, n, avail, res in cursor.fetchall()}


@pytest.mark.parametrize("inventory_strategy", RACE_CASES)
def test_three_sweepers_over_thousands_of_due_orders_with_checkouts_running(make_product, customer, settings):
    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 0  # setup: each buyer holds many pending orders
    products = [make_product(stock=5000, price="3.00") for _ in range(4)]
    ids = [p.pk for p in products]
    rng = random.Random(2026)
    carts = []
    for i in range(2000):
        cart = [(ids[i % 4], 1 + i % 3)]
        if i % 3 == 0:
            cart.append((ids[(i + 1) % 4], 2))
        rng.shuffle(cart)
        carts.append(cart)

    started = time.perf_counter()
    due = due_orders(settings, customer, carts)
    setup_seconds = time.perf_counter() - started
    print(f"\n2000 single-threaded checkouts took {setup_seconds:.1f}s")
    due_ids = {o.pk for o in due}
    reservations = sum(len(cart) for cart in carts)
    units = sum(qty for cart in carts for _pid, qty in cart)
    assert Reservation.objects.filter(order_id__in=due_ids, status="active").count() == reservations
    initial = dict.fromkeys(ids, 5000)

    # Checkouts made during the sweep have the normal TTL (the fixture restored it): the sweep must not touch them.
    buyers_carts = [
        [[(pid, rng.randint(1, 3)) for pid in rng.sample(ids, rng.randint(1, 4))] for _ in range(15)] for _ in range(6)
    ]

    def work(i):
        if i < 3:
            out = io.StringIO()
            call_command("expire_reservations", batch_size=100, stdout=out)
            return out.getvalue()
        return [buy_retrying(customer, cart, retry_gave_up=True).pk for cart in buyers_carts[i - 3]]

    outcomes = run_concurrently(9, work, timeout=180)

    assert [o.error for o in outcomes if o.error] == []  # no deadlock, lock timeout or other error
    sweeps = [report(o.value)[0] for o in outcomes[:3]]
    assert sum(s["orders"] for s in sweeps) == 2000
    assert sum(s["reservations"] for s in sweeps) == reservations
    assert sum(s["units"] for s in sweeps) == units
    new_ids = {pk for o in outcomes[3:] for pk in o.value}
    assert len(new_ids) == 90

    # Every due order cancelled for payment_timeout, every reservation expired exactly once in the ledger.
    assert set(Order.objects.filter(pk__in=due_ids).values_list("status", "cancel_reason").distinct()) == {
        ("cancelled", "payment_timeout")
    }
    assert set(Reservation.objects.filter(order_id__in=due_ids).values_list("status", flat=True)) == {"expired"}
    assert StockMovement.objects.filter(reason="expire").count() == reservations
    per_reservation = expire_rows_per_reservation()
    for (order_id, _pid), (qty, rows, available_delta, reserved_delta) in per_reservation.items():
        if order_id in due_ids:
            assert (rows, available_delta, reserved_delta) == (1, qty, -qty)
        else:
            assert rows == 0
    # The checkouts made meanwhile are untouched and hold exactly their units.
    assert set(Order.objects.filter(pk__in=new_ids).values_list("status", flat=True)) == {"pending_payment"}
    held = dict.fromkeys(ids, 0)
    for cart in (cart for carts_ in buyers_carts for cart in carts_):
        for pid, qty in cart:
            held[pid] += qty
    for pid in ids:
        inventory = Inventory.objects.get(product_id=pid)
        assert (inventory.available_stock, inventory.reserved_stock) == (initial[pid] - held[pid], held[pid])

    # A second run finds nothing to do.
    out = io.StringIO()
    call_command("expire_reservations", stdout=out)
    assert report(out.getvalue()) == [
        {"orders": 0, "reservations": 0, "units": 0, "batches": 0, "due": 0, "overdue": 0.0}
    ]
    assert_invariants()


@pytest.mark.parametrize("inventory_strategy", RACE_CASES)
def test_checkouts_never_deadlock_with_sweepers_on_hot_products(
    make_product, make_customer, settings, inventory_strategy
):
    """Small batches, many of them, and buyers hammering the same two rows with carts listed both ways."""
    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 0  # setup: each buyer holds many pending orders
    hot = [make_product(stock=2000, price="1.00") for _ in range(2)]
    ids = [p.pk for p in hot]
    seller = make_customer()
    due = due_orders(settings, seller, [[(ids[i % 2], 1), (ids[(i + 1) % 2], 1)] for i in range(300)])
    buyers = [make_customer() for _ in range(12)]

    def work(i):
        if i < 4:
            out = io.StringIO()
            call_command("expire_reservations", batch_size=7, stdout=out)
            return report(out.getvalue())[0]
        cart = [(ids[0], 1), (ids[1], 1)] if i % 2 else [(ids[1], 1), (ids[0], 1)]
        made = []
        for _ in range(10):
            try:
                # Only SERIALIZABLE answers busy by design (its retries ran out); for the others busy is a failure.
                retry_busy = inventory_strategy == "serializable"
                made.append(buy_retrying(buyers[i - 4], cart, retry_gave_up=True, retry_busy=retry_busy).pk)
            except ServiceBusy as exc:  # would mean a lock timeout or repeated deadlocks
                raise AssertionError("checkout reported busy during the sweep") from exc
        return made

    outcomes = run_concurrently(16, work, timeout=120)

    assert [o.error for o in outcomes if o.error] == []
    assert sum(o.value["orders"] for o in outcomes[:4]) == len(due)
    assert sum(len(o.value) for o in outcomes[4:]) == 120
    for pid in ids:
        inventory = Inventory.objects.get(product_id=pid)
        assert (inventory.available_stock, inventory.reserved_stock) == (2000 - 120, 120)
    assert_invariants()


def test_report_counts_batches_and_exit_codes(make_product, customer, settings):
    a, b = make_product(stock=50), make_product(stock=50)
    due_orders(
        settings, customer, [[(a.pk, 1), (b.pk, 2)], [(a.pk, 3)], [(b.pk, 1)], [(a.pk, 2), (b.pk, 2)], [(a.pk, 1)]]
    )
    not_due = place_order(customer=customer, items=[(a.pk, 4)])

    out = io.StringIO()
    assert call_command("expire_reservations", "--batch-size", "2", stdout=out) is None

    (sweep,) = report(out.getvalue())
    assert {k: v for k, v in sweep.items() if k != "overdue"} == {
        "orders": 5,
        "reservations": 7,
        "units": 12,
        "batches": 3,
        "due": 5,
    }
    assert sweep["overdue"] >= 0
    assert Order.objects.get(pk=not_due.pk).status == "pending_payment"
    assert "stopped" not in out.getvalue()  # only a --loop run reports stopping

    for args, message in [
        (["--batch-size", "0"], "--batch-size must be at least 1"),
        (["--interval", "-1"], "--interval must not be negative"),
    ]:
        with pytest.raises(CommandError, match=message):
            call_command("expire_reservations", *args)
    assert_invariants()


def test_a_sweep_expires_what_is_due_and_nothing_due_later(make_product, customer):
    """The claim compares the payment deadline with the database's now(): an order due in 30 s is left alone, one
    that fell due a second ago is cancelled (a sweeper running early would take payments away from customers)."""
    product = make_product(stock=10)
    soon = place_order(customer=customer, items=[(product.pk, 2)])
    due = place_order(customer=customer, items=[(product.pk, 3)])
    with transaction.atomic(), connection.cursor() as cursor:  # one now() for an order and its reservations
        for order, shift in ((soon, "30 seconds"), (due, "-1 second")):
            cursor.execute(
                "UPDATE orders SET payment_expires_at = now() + %s::interval WHERE id = %s", [shift, order.pk]
            )
            cursor.execute(
                "UPDATE inventory_reservations SET expires_at = now() + %s::interval WHERE order_id = %s",
                [shift, order.pk],
            )

    out = io.StringIO()
    call_command("expire_reservations", stdout=out)

    (sweep,) = report(out.getvalue())
    assert (sweep["due"], sweep["orders"], sweep["units"]) == (1, 1, 3)
    assert Order.objects.get(pk=soon.pk).status == "pending_payment"
    assert Order.objects.get(pk=due.pk).status == "cancelled"
    assert Inventory.objects.get(product=product).reserved_stock == 2
    assert_invariants()


# --------------------------------------------------------------------------------------------------------------
# Helpers for the command as a real process (also backoffice/tests/test_sweeper_loop.py)


def subprocess_env():
    db = connection.settings_dict
    auth = quote(db["USER"]) + (f":{quote(db['PASSWORD'])}" if db.get("PASSWORD") else "")
    host = db.get("HOST") or ""
    if host.startswith("/"):
        url = f"postgres://{auth}@/{db['NAME']}?host={quote(host)}"
    else:
        url = f"postgres://{auth}@{host}:{db.get('PORT') or 5432}/{db['NAME']}"
    return {**os.environ, "DATABASE_URL": url, "PYTHONUNBUFFERED": "1", "DB_CONN_MAX_AGE": "0"}


def manage(*args):
    return [sys.executable, str(BASE_DIR / "manage.py"), "expire_reservations", *args]


def naive_sweep(all_read):
    """TEST ONLY: the sweeper without its protections. It reads the due reservations with a plain SELECT (no
    SKIP LOCKED claim of the orders, no ``WHERE status = 'active'`` on the write) and then expires them by id,
    clamping reserved_stock at zero like the seed's sweeper SQL. ``all_read`` lines every copy up after the read,
    so each one acts on the same snapshot."""
    from django.db import transaction

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, product_id, qty FROM inventory_reservations "
            "WHERE status = 'active' AND expires_at <= now() ORDER BY product_id, id"
        )
        due = cursor.fetchall()
        all_read.wait(timeout=60)
        for reservation_id, product_id, qty in due:
            cursor.execute("UPDATE inventory_reservations SET status = 'expired' WHERE id = %s", [reservation_id])
            cursor.execute(
                "UPDATE stock_buckets SET available_stock = available_stock + %s, "
                "reserved_stock = GREATEST(reserved_stock - %s, 0) WHERE product_id = %s",
                [qty, qty, product_id],
            )
        return len(due)


def test_control_naive_sweepers_return_the_same_units_several_times(settings, make_product, customer):
    """Three copies of a sweeper without the claim and the conditional update, on the same due orders: every
    copy returns every unit. The real sweepers, raced the same way above, return each unit exactly once."""
    from orders.audit import audit_inventory

    product = make_product(stock=10)
    due_orders(settings, customer, [[(product.pk, 2)] for _ in range(3)])  # 6 reserved, 4 available
    all_read = threading.Barrier(3)

    outcomes = run_concurrently(3, lambda i: naive_sweep(all_read))

    assert [o.error for o in outcomes if o.error] == []
    assert [o.value for o in outcomes] == [3, 3, 3]  # each copy expired all three reservations
    inventory = Inventory.objects.get(product=product)
    assert (inventory.available_stock, inventory.reserved_stock) == (4 + 3 * 6, 0)  # 12 units out of nothing
    assert {v.check for v in audit_inventory()} >= {"counters_vs_ledger"}
