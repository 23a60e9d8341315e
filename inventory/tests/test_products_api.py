import pytest

pytestmark = pytest.mark.django_db


def test_products_are_public_with_available_stock(client, make_product):
    on_sale = make_product(stock=7, price="99.90", name="Serum")
    make_product(stock=3, is_active=False)

    listing = client.get("/v1/products")
    detail = client.get(f"/v1/products/{on_sale.pk}")

    assert listing.status_code == 200
    assert listing.json() == {
        "products": [
            {
                "id": on_sale.pk,
                "sku": on_sale.sku,
                "name": "Serum",
                "price": "99.90",
                "max_per_customer": None,
                "available_stock": 7,
                "sale_price": None,
                "sale_starts_at": None,
                "sale_ends_at": None,
                "sale": None,
                "seconds_to_start": None,
            }
        ]
    }
    assert detail.status_code == 200
    assert detail.json()["available_stock"] == 7


def test_unknown_product_is_404_json(client):
    response = client.get("/v1/products/424242")
    assert response.status_code == 404
    assert response.json()["code"] == "product_not_found"


def test_products_show_their_per_customer_limit(client, make_product):
    limited = make_product(stock=50, max_per_customer=2)

    listing = client.get("/v1/products")
    detail = client.get(f"/v1/products/{limited.pk}")

    assert [p["max_per_customer"] for p in listing.json()["products"] if p["id"] == limited.pk] == [2]
    assert detail.json()["max_per_customer"] == 2
