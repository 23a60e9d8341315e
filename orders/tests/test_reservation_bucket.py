"""A reservation names a stock row of its own product: the trigger of migration 0003 refuses a bucket the product has
no stock row for, even when another product has a row of that number."""

import pytest
from django.db import IntegrityError, transaction

from checkout.testing import place_order
from orders.models import Reservation

pytestmark = pytest.mark.django_db


def test_a_reservation_cannot_name_a_bucket_that_only_another_product_has(make_product, customer):
    one_row = make_product(stock=5)
    make_product(stock=8, buckets=4)  # has rows 0..3
    order = place_order(customer=customer, items=[(one_row.pk, 1)])
    reservation = Reservation.objects.get(order=order)
    assert reservation.bucket == 0

    with pytest.raises(IntegrityError, match="has no stock row 3"), transaction.atomic():
        Reservation.objects.filter(pk=reservation.pk).update(bucket=3)

    assert Reservation.objects.get(pk=reservation.pk).bucket == 0
