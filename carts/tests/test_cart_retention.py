"""Expired and checked-out carts are pruned by prune_retention and the sweeper loop, after CART_RETENTION_SECONDS
(database clock); younger ones, and open carts that have not expired, are kept."""

import io
import threading

import pytest
from django.core.management import call_command
from django.db import connection

from carts import services
from carts.models import Cart, CartItem
from checkout.testing import place_cart
from orders.selectors import OrderView

pytestmark = pytest.mark.django_db


def shift(cart_id, *, expires, updated):
    """Test setup only: move a cart's expiry and last change by the database clock."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE carts SET expires_at = now() + %s::interval, updated_at = now() + %s::interval WHERE id = %s",
            [expires, updated, cart_id],
        )


def make_cart(customer, product):
    return services.cart_create(customer=customer, items=[(product.pk, 1)]).cart_id


def test_prune_retention_deletes_long_expired_and_long_checked_out_carts_only(customer, make_product, settings):
    settings.CART_RETENTION_SECONDS = 3600
    product = make_product(stock=10)
    carts = {name: make_cart(customer, product) for name in ("open", "expired_recently", "expired_long_ago")}
    carts["checked_out_long_ago"] = make_cart(customer, product)
    carts["checked_out_recently"] = make_cart(customer, product)
    for name in ("checked_out_long_ago", "checked_out_recently"):
        assert isinstance(place_cart(customer=customer, cart_id=carts[name]), OrderView)
    shift(carts["expired_recently"], expires="-30 minutes", updated="-60 minutes")
    shift(carts["expired_long_ago"], expires="-61 minutes", updated="-91 minutes")
    shift(carts["checked_out_long_ago"], expires="+20 minutes", updated="-61 minutes")
    out = io.StringIO()

    call_command("prune_retention", stdout=out)

    kept = set(Cart.objects.values_list("pk", flat=True))
    assert kept == {carts["open"], carts["expired_recently"], carts["checked_out_recently"]}
    assert set(CartItem.objects.values_list("cart_id", flat=True)) == kept
    assert "carts 2 deleted" in out.getvalue()


def test_pruning_runs_in_batches(customer, make_product, settings):
    settings.CART_RETENTION_SECONDS = 0
    product = make_product(stock=10)
    for _ in range(5):
        shift(make_cart(customer, product), expires="-1 minute", updated="-1 minute")

    assert services.carts_prune(batch_size=2) == 5
    assert not Cart.objects.exists() and not CartItem.objects.exists()


def test_the_sweeper_loop_prunes_carts_too(customer, make_product, settings):
    settings.CART_RETENTION_SECONDS = 60
    shift(make_cart(customer, make_product(stock=1)), expires="-2 minutes", updated="-2 minutes")
    stop = threading.Event()

    class StopAfterFirstSweep(io.StringIO):
        def write(self, text):
            if "orders cancelled" in text:
                stop.set()
            return super().write(text)

    call_command("expire_reservations", loop=True, interval=0, stop_event=stop, stdout=StopAfterFirstSweep())

    assert not Cart.objects.exists()
