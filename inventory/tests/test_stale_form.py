"""Set counted stock while customers are checking out: the form carries the inventory version it was loaded with,
and a save against a row that moved on is refused. Real threads, each with its own database connection."""

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction
from django.test import Client
from django.urls import reverse

from checkout.testing import place_order
from devtools.testing import assert_invariants, run_concurrently
from inventory.models import Inventory, StockBucket, StockMovement
from inventory.permissions import ensure_ops_groups
from orders.audit import audit_inventory
from orders.models import Order, Reservation

pytestmark = pytest.mark.django_db(transaction=True)

STALE = "Stock changed while you were editing"


@pytest.fixture
def manager_client():
    user = get_user_model().objects.create_user(username="counter", password="irrelevant-pass", is_staff=True)
    ensure_ops_groups()["stock_managers"].user_set.add(user)
    client = Client()
    client.force_login(user)
    return client


def set_counted_url(product):
    return reverse("admin:inventory_inventory_set_counted", args=[product.pk])


def counters(product):
    inv = Inventory.objects.get(product=product)
    return inv.available_stock, inv.reserved_stock, inv.version


def checkout_in_another_thread(customer, product, qty):
    """A real checkout on its own connection, committed before this returns."""
    [outcome] = run_concurrently(1, lambda i: place_order(customer=customer, items=[(product.pk, qty)]))
    assert outcome.error is None, outcome.error
    return outcome.value


def test_count_typed_against_stale_figures_is_refused_and_the_reservation_survives(
    manager_client, make_product, customer
):
    product = make_product(stock=10)
    page = manager_client.get(set_counted_url(product))
    loaded_version = page.context["form"].initial["version"]
    assert f'name="version" value="{loaded_version}"' in page.content.decode()
    assert (page.context["inventory"].available_stock, loaded_version) == (10, counters(product)[2])

    # While the ops person counts the shelf, a customer checks out 2 units on another connection.
    order = checkout_in_another_thread(customer, product, 2)
    ledger_rows = StockMovement.objects.count()

    response = manager_client.post(
        set_counted_url(product), {"counted": "15", "note": "shelf count", "version": loaded_version}
    )

    assert response.status_code == 409
    assert STALE in response.content.decode()
    assert counters(product) == (8, 2, loaded_version + 1)  # nothing written by the refused save
    assert StockMovement.objects.count() == ledger_rows
    assert not StockMovement.objects.filter(reason=StockMovement.Reason.COUNT).exists()
    reservation = Reservation.objects.get(order=order)
    assert (reservation.status, reservation.qty) == (Reservation.Status.ACTIVE, 2)
    assert Order.objects.get(pk=order.pk).status == Order.Status.PENDING_PAYMENT
    assert_invariants()


def test_count_and_checkout_at_the_same_instant_never_lose_the_reservation(manager_client, make_product, make_customer):
    """The save and the checkout are released together by a barrier. Whichever commits first, the outcome is one
    of the two serial ones: count refused (checkout first) or count applied and then the checkout on top."""
    rounds = 6
    for _ in range(rounds):
        product = make_product(stock=10)
        buyer = make_customer()
        version = manager_client.get(set_counted_url(product)).context["form"].initial["version"]

        def act(i, product=product, buyer=buyer, version=version):
            if i == 0:
                return manager_client.post(
                    set_counted_url(product), {"counted": "15", "note": "race count", "version": version}
                ).status_code
            return place_order(customer=buyer, items=[(product.pk, 2)])

        save, checkout = run_concurrently(2, act)

        assert (save.error, checkout.error) == (None, None)
        count_rows = list(
            StockMovement.objects.filter(product=product, reason=StockMovement.Reason.COUNT).values_list(
                "available_delta", flat=True
            )
        )
        if save.value == 409:  # the checkout committed first
            assert counters(product)[:2] == (8, 2)
            assert count_rows == []
        else:  # the count committed first, the checkout reserved from the counted figure
            assert save.value == 302
            assert counters(product)[:2] == (13, 2)
            assert count_rows == [5]
        reservation = Reservation.objects.get(order=checkout.value)
        assert (reservation.status, reservation.qty) == (Reservation.Status.ACTIVE, 2)
    assert_invariants()


def naive_set_counted(product_id, loaded_available, counted):
    """The bug the version check prevents: an ops form that saves the typed figure as an absolute value and
    logs the difference from what it showed when it was loaded."""
    with transaction.atomic():
        StockBucket.objects.filter(product_id=product_id, bucket=0).update(available_stock=counted)
        StockMovement.objects.create(
            product_id=product_id,
            available_delta=counted - loaded_available,
            reserved_delta=0,
            reason=StockMovement.Reason.COUNT,
            note="naive count",
        )


def test_control_naive_absolute_save_silently_overwrites_the_concurrent_reservation(make_product, customer):
    product = make_product(stock=10)
    loaded_available = counters(product)[0]  # the form shows 10
    checkout_in_another_thread(customer, product, 2)  # meanwhile: 8 available, 2 reserved

    naive_set_counted(product.pk, loaded_available, 15)  # ops typed 15: no error, nothing refused

    available, reserved, _ = counters(product)
    # The 2 units held by the pending order are now also on sale: 17 units promised, 15 on the shelf.
    assert (available, reserved) == (15, 2)
    assert available + reserved != 15
    violations = audit_inventory()
    # the product's totals, and its one bucket's (the per-bucket twin of the same check)
    assert {(v.check, v.subject_id) for v in violations} == {
        ("counters_vs_ledger", product.pk),
        ("bucket_counters_vs_ledger", product.pk),
    }
    violations = [v for v in violations if v.check == "counters_vs_ledger"]
    assert "available=15" in violations[0].detail
    assert "available=13" in violations[0].detail  # what the ledger says: 10 - 2 + 5
    with pytest.raises(AssertionError, match="counters_vs_ledger"):
        assert_invariants()
