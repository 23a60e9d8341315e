"""A cart shows the sale price inside the sale window only, in the answers of its GET and of its create and replace
(the SQL rule ``inventory.selectors.UNIT_PRICE_SQL`` and its Python copy ``ProductView.unit_price``): a rule testing
the window loosely would show the sale price before the opening or after the end, which the checkout never charges.
"""

import pytest

from inventory.tests.test_sale_window import set_window

pytestmark = pytest.mark.django_db


def test_a_carts_get_shows_the_sale_price_inside_the_window_only(api, make_product):  # type: ignore[no-untyped-def]
    on_sale, scheduled, ended, no_window = (make_product(stock=5, price="129.00") for _ in range(4))
    set_window(on_sale, starts_in=-60, ends_in=3600, price="99.00")
    set_window(scheduled, starts_in=90, ends_in=3600, price="99.00")
    set_window(ended, starts_in=-3600, ends_in=-60, price="99.00")
    items = [{"product_id": p.pk, "qty": 1} for p in (on_sale, scheduled, ended, no_window)]
    cart = api.post("/v1/carts", {"items": items}, format="json").json()

    shown = api.get(f"/v1/carts/{cart['cart_id']}").json()

    prices = {item["product_id"]: (item["unit_price"], item["sale"]) for item in shown["items"]}
    assert prices == {
        on_sale.pk: ("99.00", "open"),
        scheduled.pk: ("129.00", "scheduled"),
        ended.pk: ("129.00", "ended"),
        no_window.pk: ("129.00", None),
    }
    assert shown["total"] == "486.00"  # 99 + 3 x 129


def test_a_carts_create_and_replace_answers_show_the_sale_price_inside_the_window_only(api, make_product):  # type: ignore[no-untyped-def]
    on_sale, scheduled, ended, no_window = (make_product(stock=5, price="129.00") for _ in range(4))
    set_window(on_sale, starts_in=-60, ends_in=3600, price="99.00")
    set_window(scheduled, starts_in=90, ends_in=3600, price="99.00")
    set_window(ended, starts_in=-3600, ends_in=-60, price="99.00")
    expected = {
        on_sale.pk: ("99.00", "open"),
        scheduled.pk: ("129.00", "scheduled"),
        ended.pk: ("129.00", "ended"),
        no_window.pk: ("129.00", None),
    }
    items = [{"product_id": p.pk, "qty": 1} for p in (on_sale, scheduled, ended, no_window)]

    created = api.post("/v1/carts", {"items": items}, format="json").json()
    replaced = api.put(f"/v1/carts/{created['cart_id']}", {"items": items}, format="json").json()

    for answer in (created, replaced):
        assert {item["product_id"]: (item["unit_price"], item["sale"]) for item in answer["items"]} == expected
        assert answer["total"] == "486.00"  # 99 + 3 x 129
