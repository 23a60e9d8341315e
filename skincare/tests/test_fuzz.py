"""Any input, never a 500: every endpoint, any method, any body (size, JSON shape or depth, bytes), any header
value. A refusal is a JSON 4xx and changes nothing; the audit is clean afterwards.

Property-based with Hypothesis, derandomized and on a fixed example budget, so that every run (and CI) sends the
same requests. The explicit cases below pin the answers that matter: 413 ``payload_too_large``, deep nesting 400,
unknown paths and ids 404.
"""

import json
import time
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkout.testing import place_order
from devtools.testing import assert_invariants
from payments import signing

pytestmark = pytest.mark.django_db

SECRET = "whsec-fuzz-secret"
# Fixed budget: the same examples every run (derandomize), small enough for CI (~2 s each).
BUDGET = settings(
    max_examples=300,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


def db_state() -> tuple[Any, ...]:
    """Everything a request could change, in one round trip."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT (SELECT COUNT(*) FROM orders), (SELECT COUNT(*) FROM inventory_reservations),
                   (SELECT COUNT(*) FROM payment_attempts), (SELECT COUNT(*) FROM stock_movements),
                   (SELECT COUNT(*) FROM processed_events), (SELECT COUNT(*) FROM api_tokens),
                   (SELECT string_agg(format('%s:%s', id, status), ',' ORDER BY id) FROM orders),
                   (SELECT string_agg(format('%s:%s:%s:%s', product_id, available_stock, reserved_stock, version),
                                      ',' ORDER BY product_id) FROM inventories),
                   (SELECT string_agg(format('%s:%s:%s:%s', id, status, expires_at, order_id), ',' ORDER BY id)
                    FROM carts),
                   (SELECT string_agg(format('%s:%s:%s', cart_id, product_id, qty), ',' ORDER BY cart_id, product_id)
                    FROM cart_items)
            """
        )
        return cursor.fetchone()


@pytest.fixture
def world(make_product, make_customer, settings):
    """A product on sale, a customer with a pending order, and someone else's order; the customer's open cart
    (``mycart``) and expired cart (``oldcart``), and someone else's cart (``theircart``)."""
    from carts import services as cart_services

    settings.PAYMENT_WEBHOOK_SECRET = SECRET
    settings.PAYMENT_SANDBOX = False
    product = make_product(stock=50, price="10.00")
    customer, stranger = make_customer(), make_customer()
    own = place_order(customer=customer, items=[(product.pk, 1)])
    other = place_order(customer=stranger, items=[(product.pk, 1)])
    carts = {
        "mycart": cart_services.cart_create(customer=customer, items=[(product.pk, 1)]).cart_id,
        "oldcart": cart_services.cart_create(customer=customer, items=[(product.pk, 1)]).cart_id,
        "theircart": cart_services.cart_create(customer=stranger, items=[(product.pk, 1)]).cart_id,
    }
    with connection.cursor() as cursor:
        cursor.execute("UPDATE carts SET expires_at = now() - interval '1 second' WHERE id = %s", [carts["oldcart"]])
    return {"product": product, "customer": customer, "own": own, "other": other, "carts": carts}


PATHS = [
    "/v1/checkout",
    "/v1/products",
    "/v1/products/{id}",
    "/v1/orders/{id}",
    "/v1/orders/{id}/cancel",
    "/v1/payments/webhook",
    "/v1/payments/sandbox/{id}",
    "/v1/carts",
    "/v1/carts/{id}",
    "/v1/carts/{id}/checkout",
    "/healthz",
    "/readyz",
    "/admin/",
    "/admin/login/",
    "/v1/{text}",
    "/{text}",
]
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "TRACE", "BREW"]
CONTENT_TYPES = [
    "application/json",
    "application/json; charset=utf-8",
    "application/json; charset=latin-1",
    "application/json; charset=utf-16",
    "application/json; charset=no-such-charset",
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=xyz",
    "multipart/form-data",
    "",
    "*/*",
]
# What a WSGI server can hand over as a header value: bytes decoded as latin-1, no line breaks.
header_text = st.text(
    st.sampled_from("\x00\x7f\xff\t ,=;")
    | st.characters(min_codepoint=0, max_codepoint=255, exclude_characters="\r\n"),
    max_size=60,
)
# Known-nasty values next to the generated ones: NUL, too long for the column, non-ASCII, control characters.
NASTY_TOKENS = ["Bearer tok\x00en", "Bearer " + "a" * 41, "Bearer \xff\xfe", "Bearer \x7f", "Bearer", "bearer x y"]
ids = st.one_of(
    st.sampled_from(["own", "other", "product", "mycart", "oldcart", "theircart"]),
    st.uuids().map(str),
    st.integers(min_value=0, max_value=2**80).map(str),
    st.text(max_size=12),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.text(max_size=20),
    st.sampled_from(["1", "10.00", "1e400", "NaN", "-0", "\x00", "\ud800"]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
numbers_or_junk = st.one_of(st.integers(min_value=-5, max_value=2**64), scalars, st.sampled_from(["product"]))
checkout_bodies = st.fixed_dictionaries(
    {},
    optional={
        "items": st.one_of(
            st.lists(
                st.fixed_dictionaries({}, optional={"product_id": numbers_or_junk, "qty": numbers_or_junk}),
                max_size=25,
            ),
            json_values,
        ),
        "extra": json_values,
    },
)
webhook_bodies = st.fixed_dictionaries(
    {},
    optional={
        "event_id": st.one_of(st.text(max_size=210), scalars),
        "type": st.one_of(st.sampled_from(["payment.succeeded", "payment.failed"]), scalars),
        "order_id": st.one_of(st.sampled_from(["own", "other"]), numbers_or_junk),
        "amount": st.one_of(st.sampled_from(["10.00", "9.99", "1e3", "-1", "99999999999.99", "Infinity"]), scalars),
        "currency": st.one_of(st.sampled_from(["IDR", "JPY", "idr", "", "IDRX"]), scalars),
        "provider_reference": st.one_of(st.text(max_size=210), scalars),
        "payload": json_values,
    },
)
deep = st.tuples(st.integers(min_value=1, max_value=60_000), st.sampled_from(["[", '{"a":'])).map(
    lambda t: (t[1] * t[0] + ("1" if t[1] != "[" else "") + ("]" if t[1] == "[" else "}") * t[0]).encode()
)


def encode(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True, ensure_ascii=False).encode("utf-8", "surrogatepass")


bodies = st.one_of(
    st.just(b""),
    st.binary(max_size=200),
    json_values.map(encode),
    checkout_bodies.map(encode),
    webhook_bodies.map(encode),
    deep,
    st.text(max_size=100).map(lambda t: t.encode("utf-8", "surrogatepass")),
)


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    template = draw(st.sampled_from(PATHS))
    path = template.replace("{id}", draw(ids)).replace("{text}", draw(st.text(max_size=30)))
    return {
        "method": draw(st.sampled_from(METHODS)),
        "path": path,
        "body": draw(bodies),
        "content_type": draw(st.sampled_from(CONTENT_TYPES) | header_text),
        "auth": draw(st.sampled_from([None, "valid", "stranger", *NASTY_TOKENS]) | header_text.map("Bearer ".__add__)),
        "signature": draw(st.sampled_from([None, "valid"]) | header_text),
        "query": draw(st.sampled_from(["", "?a=1", "?format=xml", "?x=%00"]) | st.text(max_size=20)),
    }


def send(client: Client, world: dict[str, Any], request: dict[str, Any]) -> Any:
    names = {"own": world["own"].pk, "other": world["other"].pk, "product": world["product"].pk, **world["carts"]}
    path = request["path"]
    body = request["body"]
    for name, pk in names.items():
        path = path.replace(f"/{name}", f"/{pk}")
        body = body.replace(f'"{name}"'.encode(), str(pk).encode())
    headers: dict[str, str] = {}
    auth = request["auth"]
    if auth == "valid":
        headers["HTTP_AUTHORIZATION"] = f"Bearer {world['customer'].api_token}"
    elif auth == "stranger":
        headers["HTTP_AUTHORIZATION"] = "Bearer " + "0" * 40
    elif auth is not None:
        headers["HTTP_AUTHORIZATION"] = auth
    signature = request["signature"]
    if signature == "valid":
        headers["HTTP_X_SIGNATURE"] = signing.sign(body=body, secret=SECRET, timestamp=int(time.time()))
    elif signature is not None:
        headers["HTTP_X_SIGNATURE"] = signature
    return client.generic(
        request["method"], path + request["query"], data=body, content_type=request["content_type"], **headers
    )


def check(response: Any, before: tuple[Any, ...], request: dict[str, Any]) -> None:
    status = response.status_code
    assert status < 500, (status, request, response.content[:500])
    if status >= 400:
        assert response["Content-Type"].startswith("application/json"), (status, request, response.content[:200])
        if request["method"] != "HEAD":
            body = json.loads(response.content)
            assert isinstance(body.get("code"), str) and body.get("error"), body
        assert db_state() == before, ("a refused request changed the database", status, request)
    elif request["method"] in ("GET", "HEAD", "OPTIONS"):
        assert db_state() == before, ("a read changed the database", status, request)


def test_any_request_to_any_endpoint_is_never_a_5xx_and_a_refusal_changes_nothing(world):
    client = Client()  # re-raises anything that would have become a 500, with its traceback

    @BUDGET
    @given(request=requests())
    def one(request: dict[str, Any]) -> None:
        before = db_state()
        check(send(client, world, request), before, request)

    one()
    assert_invariants()


def test_any_signed_webhook_body_is_never_a_5xx(world):
    """Signed, so every body gets past the signature check to the parser, the validation and the service."""
    client = Client()

    @BUDGET
    @given(body=bodies, content_type=st.sampled_from(CONTENT_TYPES))
    def one(body: bytes, content_type: str) -> None:
        request = {"method": "POST", "path": "/v1/payments/webhook", "body": body, "content_type": content_type}
        request |= {"auth": None, "signature": "valid", "query": ""}
        before = db_state()
        check(send(client, world, request), before, request)

    one()
    assert_invariants()


def test_any_checkout_body_from_a_customer_is_never_a_5xx(world):
    client = Client()

    @BUDGET
    @given(body=st.one_of(checkout_bodies.map(encode), bodies))
    def one(body: bytes) -> None:
        request = {"method": "POST", "path": "/v1/checkout", "body": body, "content_type": "application/json"}
        request |= {"auth": "valid", "signature": None, "query": ""}
        before = db_state()
        check(send(client, world, request), before, request)

    one()
    assert_invariants()


def test_any_cart_request_from_a_customer_is_never_a_5xx(world):
    """Create, replace and check out carts (open, expired, someone else's, unknown) with any checkout-like body."""
    client = Client()

    @BUDGET
    @given(
        target=st.sampled_from(
            [
                ("POST", "/v1/carts"),
                ("PUT", "/v1/carts/{id}"),
                ("GET", "/v1/carts/{id}"),
                ("POST", "/v1/carts/{id}/checkout"),
            ]
        ),
        cart=st.sampled_from(["mycart", "oldcart", "theircart"]) | ids,
        body=st.one_of(checkout_bodies.map(encode), bodies),
    )
    def one(target: tuple[str, str], cart: str, body: bytes) -> None:
        method, template = target
        request = {"method": method, "path": template.replace("{id}", cart), "body": body}
        request |= {"content_type": "application/json", "auth": "valid", "signature": None, "query": ""}
        before = db_state()
        check(send(client, world, request), before, request)

    one()
    assert_invariants()


def test_any_header_value_on_authenticated_endpoints_is_never_a_5xx(world):
    """Authorization and signature headers are read before anything else; any value a server can deliver."""
    client = Client()
    headers = st.sampled_from([None, "valid", *NASTY_TOKENS]) | header_text | header_text.map("Bearer ".__add__)

    @BUDGET
    @given(
        path=st.sampled_from(
            [
                "/v1/checkout",
                "/v1/orders/own",
                "/v1/orders/own/cancel",
                "/v1/payments/webhook",
                "/v1/carts",
                "/v1/carts/mycart",
                "/v1/carts/mycart/checkout",
            ]
        ),
        method=st.sampled_from(["GET", "POST"]),
        auth=headers,
        signature=st.sampled_from([None, "valid"]) | header_text,
    )
    def one(path: str, method: str, auth: str | None, signature: str | None) -> None:
        request = {"method": method, "path": path, "body": b'{"items": []}', "content_type": "application/json"}
        request |= {"auth": auth, "signature": signature, "query": ""}
        before = db_state()
        check(send(client, world, request), before, request)

    one()
    assert_invariants()


# --------------------------------------------------------------------------------------------------------------
# The answers that matter, pinned


@pytest.mark.parametrize(
    "method,path",
    [
        ("POST", "/v1/checkout"),
        ("POST", "/v1/payments/webhook"),
        ("POST", "/v1/orders/own/cancel"),
        ("POST", "/v1/carts"),
        ("PUT", "/v1/carts/mycart"),
        ("GET", "/v1/products"),
        ("POST", "/admin/login/"),
        ("POST", "/healthz"),
        ("PUT", "/no/such/path"),
    ],
)
def test_a_body_over_the_limit_is_413_payload_too_large_and_changes_nothing(world, settings, method, path):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096
    before = db_state()
    body = b'{"items": [' + b" " * 5000 + b"]}"
    request = {"method": method, "path": path, "body": body, "content_type": "application/json"}
    request |= {"auth": "valid", "signature": "valid", "query": ""}

    response = send(Client(), world, request)

    assert response.status_code == 413, response.content
    assert response.json() == {"error": "Request body too large.", "code": "payload_too_large", "max_bytes": 4096}
    assert db_state() == before


def test_a_body_over_djangos_default_limit_is_413(world):
    body = b'{"event_id": "' + b"x" * 2_700_000 + b'"}'
    request = {"method": "POST", "path": "/v1/payments/webhook", "body": body, "content_type": "application/json"}
    request |= {"auth": None, "signature": "valid", "query": ""}
    before = db_state()

    response = send(Client(), world, request)

    assert response.status_code == 413
    assert response.json()["code"] == "payload_too_large"
    assert db_state() == before


@pytest.mark.parametrize("path", ["/v1/checkout", "/v1/payments/webhook", "/v1/carts"])
@pytest.mark.parametrize("depth", [65, 5_000, 200_000])
def test_deeply_nested_json_is_400_malformed_json(world, path, depth):
    body = b"[" * depth + b"]" * depth
    request = {"method": "POST", "path": path, "body": body, "content_type": "application/json"}
    request |= {"auth": "valid", "signature": "valid", "query": ""}
    before = db_state()

    response = send(Client(), world, request)

    assert response.status_code == 400, response.content
    assert response.json()["code"] == "malformed_json"
    assert db_state() == before


@pytest.mark.parametrize(
    "header", ["Bearer abc\x00def", "Bearer " + "a" * 41, "Bearer \x7f", "Bearer \xff\xfe", "Bearer  \t "]
)
def test_tokens_that_cannot_exist_are_401_without_a_database_error(world, header):
    response = Client().get("/v1/orders/1", HTTP_AUTHORIZATION=header)
    assert response.status_code == 401
    assert response.json()["code"] == "unauthorized"


@pytest.mark.parametrize(
    "path",
    [
        "/v1/orders/99999999999999999999999",
        "/v1/orders/99999999999999999999999/cancel",
        "/v1/products/99999999999999999999999",
        "/v1/orders/-1",
        "/v1/orders/abc",
        "/v1/products/1.5",
        "/v1/orders/%00",
        "/v1/payments/sandbox/99999999999999999999999",
    ],
)
def test_unknown_or_malformed_ids_are_json_404(world, path):
    client = Client()
    method = client.post if path.endswith("/cancel") else client.get
    before = db_state()

    response = method(path, HTTP_AUTHORIZATION=f"Bearer {world['customer'].api_token}")

    assert response.status_code == 404, response.content
    assert response.json()["code"] in ("not_found", "order_not_found", "product_not_found")
    assert db_state() == before


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/v1/carts/theircart", 404, "cart_not_found"),
        ("GET", "/v1/carts/00000000-0000-4000-8000-000000000000", 404, "cart_not_found"),
        ("GET", "/v1/carts/%00", 404, "cart_not_found"),
        ("GET", "/v1/carts/" + "f" * 300, 404, "cart_not_found"),
        ("POST", "/v1/carts/theircart/checkout", 404, "cart_not_found"),
        ("POST", "/v1/carts/99999999999999999999999/checkout", 404, "cart_not_found"),
        ("GET", "/v1/carts/oldcart", 410, "cart_expired"),
        ("POST", "/v1/carts/oldcart/checkout", 410, "cart_expired"),
        ("PUT", "/v1/carts/oldcart", 410, "cart_expired"),
    ],
)
def test_foreign_unknown_and_expired_carts_answer_their_code_and_change_nothing(world, method, path, status, code):
    request = {"method": method, "path": path, "body": b'{"items": [{"product_id": "product", "qty": 1}]}'}
    request |= {"content_type": "application/json", "auth": "valid", "signature": None, "query": ""}
    before = db_state()

    response = send(Client(), world, request)

    assert (response.status_code, response.json()["code"]) == (status, code), response.content
    assert db_state() == before
