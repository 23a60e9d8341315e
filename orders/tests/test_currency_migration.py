"""The data migration that gives the orders 0004_order_currency stamped ``IDR`` the shop's currency: exactly the
orders created before 0004 was applied and still stamped IDR, only when ``SHOP_CURRENCY`` differs."""

import importlib
from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder

from checkout.testing import buy
from orders.models import Order

pytestmark = pytest.mark.django_db

migration = importlib.import_module("orders.migrations.0006_order_currency_from_setting")


def order_created(make_customer, product, *, currency, before_0004: bool) -> Order:
    order = buy(make_customer(), [(product.pk, 1)])
    applied = MigrationRecorder.Migration.objects.get(app="orders", name="0004_order_currency").applied
    created = applied - timedelta(hours=1) if before_0004 else applied + timedelta(seconds=1)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE orders SET currency = %s, created_at = %s WHERE id = %s", [currency, created, order.pk])
    return order


def currencies(*orders: Order) -> list[str]:
    return [Order.objects.get(pk=o.pk).currency for o in orders]


@pytest.mark.parametrize("shop_currency", ["USD", "IDR"])
def test_only_the_orders_0004_stamped_take_the_shops_currency(
    settings, monkeypatch, make_product, make_customer, shop_currency
):
    product = make_product(stock=10)
    stamped = [order_created(make_customer, product, currency="IDR", before_0004=True) for _ in range(3)]
    already = order_created(make_customer, product, currency="EUR", before_0004=True)
    written_later = order_created(make_customer, product, currency="IDR", before_0004=False)
    settings.SHOP_CURRENCY = shop_currency
    monkeypatch.setattr(migration, "BATCH", 2)  # more than one batch

    with connection.schema_editor(atomic=False) as editor:
        migration.restamp_orders(None, editor)

    assert currencies(*stamped) == [shop_currency] * 3
    assert currencies(already, written_later) == ["EUR", "IDR"]  # not stamped by 0004: left alone
