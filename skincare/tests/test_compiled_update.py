"""``skincare.db.CompiledUpdate``: an ORM update compiled once must behave exactly like the ORM update."""

import pytest
from django.db.models import F
from django.db.models.functions import Now

from inventory.models import Inventory
from skincare.db import CompiledUpdate

pytestmark = pytest.mark.django_db


def reserve(product_id, qty):
    return (
        Inventory.objects.filter(product_id=product_id, available_stock__gte=qty),
        {
            "available_stock": F("available_stock") - qty,
            "reserved_stock": F("reserved_stock") + qty,
            "updated_at": Now(),
        },
    )


def test_compiled_once_matches_the_orm_update_and_keeps_its_guard(make_product):
    product = make_product(stock=3)
    compiled = CompiledUpdate(reserve, "product_id", "qty")

    assert compiled.execute(product_id=product.pk, qty=2) == 1
    assert compiled.execute(product_id=product.pk, qty=2) == 0  # the guard: only 1 left
    assert compiled.execute(product_id=product.pk, qty=1) == 1
    inventory = Inventory.objects.get(pk=product.pk)
    assert (inventory.available_stock, inventory.reserved_stock) == (0, 3)
    assert 'available_stock" >= %s' in compiled.sql


def test_a_statement_that_depends_on_the_slot_values_is_refused(make_product):
    """Django compiles some lookups by value (an integer outside the column's range turns the comparison into a
    constant). A statement whose SQL changes with the values must never be cached as if it did not."""
    product = make_product(stock=3)

    def value_dependent(product_id, qty):
        guard = {"available_stock__gte": qty} if qty < 1_500_000 else {}
        return Inventory.objects.filter(product_id=product_id, **guard), {"available_stock": F("available_stock") - qty}

    compiled = CompiledUpdate(value_dependent, "product_id", "qty")
    with pytest.raises(ValueError, match="depends on the slot values"):
        compiled.execute(product_id=product.pk, qty=1)
    assert Inventory.objects.get(pk=product.pk).available_stock == 3


def test_control_an_out_of_range_sentinel_would_have_compiled_the_guard_away():
    """Why the sentinels are ordinary values: with an integer below the column's range Django drops the guard."""
    queryset, _changes = reserve(1, -(2**40))
    assert 'available_stock" >=' not in str(queryset.query)
