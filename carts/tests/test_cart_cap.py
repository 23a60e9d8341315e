"""Open carts per customer are capped: a customer could otherwise create carts without limit (each row lives
CART_RETENTION_SECONDS). Over MAX_OPEN_CARTS_PER_CUSTOMER → 409 ``too_many_open_carts``, nothing written; an
expired or checked-out cart no longer counts; the cap holds under concurrent creates (+ control: counting without the customer's lock lets every racer through)."""

import threading

import pytest
from django.db import connection

from carts import services
from carts.exceptions import TooManyOpenCarts
from carts.models import Cart
from devtools.testing import run_concurrently


def create(api, product):  # type: ignore[no-untyped-def]
    return api.post("/v1/carts", {"items": [{"product_id": product.pk, "qty": 1}]}, format="json")


@pytest.mark.django_db
def test_a_customer_over_the_cap_gets_409_and_nothing_is_written(api, make_product, make_customer, settings):  # type: ignore[no-untyped-def]
    settings.MAX_OPEN_CARTS_PER_CUSTOMER = 3
    product = make_product(stock=5)
    assert [create(api, product).status_code for _ in range(3)] == [201] * 3

    refused = create(api, product)
    assert refused.status_code == 409
    assert refused.json() == {
        "error": "You have too many open carts; check one out or let one expire.",
        "code": "too_many_open_carts",
        "max_open_carts": 3,
    }
    assert Cart.objects.count() == 3

    # An expired cart no longer counts, nor does another customer's.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE carts SET expires_at = now() - interval '1 second' WHERE id = %s", [Cart.objects.first().pk]
        )
    assert create(api, product).status_code == 201
    other = make_customer()
    services.cart_create(customer=other, items=[(product.pk, 1)])
    settings.MAX_OPEN_CARTS_PER_CUSTOMER = 0  # 0 = no cap
    assert create(api, product).status_code == 201


@pytest.mark.django_db
def test_a_checked_out_cart_no_longer_counts_against_the_cap(api, make_product, settings):  # type: ignore[no-untyped-def]
    settings.MAX_OPEN_CARTS_PER_CUSTOMER = 2
    product = make_product(stock=5)
    first, _second = (create(api, product).json()["cart_id"] for _ in range(2))
    assert create(api, product).json()["code"] == "too_many_open_carts"

    assert api.post(f"/v1/carts/{first}/checkout").status_code == 201

    assert create(api, product).status_code == 201  # two open again: the checked-out one is an order now
    assert create(api, product).json()["code"] == "too_many_open_carts"
    assert Cart.objects.filter(status=Cart.Status.CHECKED_OUT).count() == 1
    assert Cart.objects.filter(status=Cart.Status.OPEN).count() == 2


@pytest.mark.django_db(transaction=True)
def test_the_cap_holds_when_a_customer_creates_carts_concurrently(make_product, make_customer, settings):  # type: ignore[no-untyped-def]
    settings.MAX_OPEN_CARTS_PER_CUSTOMER = 3
    product, customer = make_product(stock=5), make_customer()

    outcomes = run_concurrently(12, lambda i: services.cart_create(customer=customer, items=[(product.pk, 1)]))

    assert sum(o.error is None for o in outcomes) == 3
    assert all(o.error is None or isinstance(o.error, TooManyOpenCarts) for o in outcomes)
    assert Cart.objects.filter(customer=customer).count() == 3


@pytest.mark.django_db(transaction=True)
def test_control_counting_without_the_customer_lock_lets_every_racer_through(
    make_product, make_customer, settings, monkeypatch
):  # type: ignore[no-untyped-def]
    settings.MAX_OPEN_CARTS_PER_CUSTOMER = 3
    product, customer = make_product(stock=5), make_customer()
    counted = threading.Barrier(6)

    def naive(*, customer):  # type: ignore[no-untyped-def]
        with connection.cursor() as cursor:
            cursor.execute(services._OPEN_CARTS_SQL, {"customer_id": customer.pk, "open": Cart.Status.OPEN.value})
            (open_carts,) = cursor.fetchone()
        counted.wait(timeout=60)  # every racer has counted before any inserts
        if open_carts >= settings.MAX_OPEN_CARTS_PER_CUSTOMER:
            raise TooManyOpenCarts(max_open_carts=settings.MAX_OPEN_CARTS_PER_CUSTOMER)

    monkeypatch.setattr(services, "_refuse_too_many_open_carts", naive)
    outcomes = run_concurrently(6, lambda i: services.cart_create(customer=customer, items=[(product.pk, 1)]))

    assert [o.error for o in outcomes] == [None] * 6
    assert Cart.objects.filter(customer=customer).count() == 6  # twice the cap


@pytest.mark.django_db
def test_the_cart_admin_is_read_only_including_delete(api, make_product, client, django_user_model):  # type: ignore[no-untyped-def]
    """Not even a superuser deletes carts in the admin (one at a time or in bulk): they are the customers', and
    prune_retention removes them."""
    product = make_product(stock=5)
    cart_id = create(api, product).json()["cart_id"]
    admin_user = django_user_model.objects.create_superuser("cart-admin", password="right-password-for-tests")
    client.force_login(admin_user)

    listing = client.get("/admin/carts/cart/")
    assert listing.status_code == 200
    assert "delete_selected" not in listing.content.decode()
    bulk = client.post(
        "/admin/carts/cart/", {"action": "delete_selected", "_selected_action": [cart_id], "post": "yes"}
    )
    assert bulk.status_code in (200, 302)
    assert client.get(f"/admin/carts/cart/{cart_id}/delete/").status_code == 403
    assert client.post(f"/admin/carts/cart/{cart_id}/delete/", {"post": "yes"}).status_code == 403
    assert client.get(f"/admin/carts/cart/{cart_id}/change/").status_code == 200  # still viewable
    assert Cart.objects.filter(pk=cart_id).exists()
