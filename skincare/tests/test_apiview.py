"""One request path: every endpoint is a ``skincare.apiview.ApiView`` (its own dispatch, not DRF's), answering as DRF's
did: the parser and renderer read and write DRF's bytes, the steps run in DRF's order (authentication, permissions,
the method), the ``Allow`` header names the view's methods, and nothing is left for the cyclic garbage collector."""

import datetime
import gc
import io
import uuid
from decimal import Decimal

import pytest
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.http import HttpResponseRedirect
from django.test import RequestFactory
from django.urls import URLPattern, URLResolver, get_resolver
from django.views import View
from rest_framework import parsers, renderers
from rest_framework.exceptions import ParseError
from rest_framework.permissions import AllowAny
from rest_framework.views import APIView

from bench import cpu
from checkout.api import CheckoutApi
from inventory.api import ProductDetailApi
from skincare.api import MAX_JSON_DEPTH, JSONParser, JSONRenderer
from skincare.apiview import ApiView


def routed_views(patterns=None):
    """Every view class the URLconf routes to, with its route."""
    for entry in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(entry, URLResolver):
            yield from routed_views(entry.url_patterns)
        elif isinstance(entry, URLPattern):
            cls = getattr(entry.callback, "cls", None) or getattr(entry.callback, "view_class", None)
            if cls is not None:
                yield str(entry.pattern), cls


# The OpenAPI document and its browsable pages: drf-spectacular's views, generated from the code, not the API.
OPENAPI_VIEWS = ("skincare.openapi", "drf_spectacular.")


def test_every_api_endpoint_is_an_apiview():
    drf_views = {route: cls for route, cls in routed_views() if issubclass(cls, APIView)}
    assert any(route == "checkout" for route in drf_views)  # control: the walk finds the API's routes
    outside = {
        route: cls.__qualname__
        for route, cls in drf_views.items()
        if not issubclass(cls, ApiView) and not cls.__module__.startswith(OPENAPI_VIEWS)
    }
    assert outside == {}


BODIES = [
    b'{"items": [{"product_id": 1, "qty": 2}]}',
    '{"name": "s\u00e9rum \u2028 \U0001f600"}'.encode(),
    b'  [1, 2.5, true, null, "x"]  ',
    b'{"a": 1e400}',
    b'{"a": NaN}',
    b'{"a": Infinity}',
    b'{"a": 1,}',
    b"\xef\xbb\xbf{}",  # a byte order mark
    b"\xff\xfe",  # not UTF-8
    b"",
    b'"\\ud800"',
    b"[" * 100 + b"]" * 100,
]


@pytest.mark.parametrize("body", BODIES)
def test_the_parser_reads_what_drfs_parser_reads(body):
    def parse(parser, encoding="utf-8"):
        try:
            return "data", parser.parse(io.BytesIO(body), "application/json", {"encoding": encoding})
        except ParseError:
            return "400", None

    for encoding in ("utf-8", "latin-1"):
        ours, theirs = parse(JSONParser(), encoding), parse(parsers.JSONParser(), encoding)
        if theirs[0] == "data" and body.startswith(b"[" * 100):
            assert ours[0] == "400"  # deeper than MAX_JSON_DEPTH: refused, as before
        else:
            assert ours == theirs


VALUES = [
    {"error": "Stock conflict.", "code": "stock_conflict", "product_ids": [1, 2]},
    {"name": "s\u00e9rum \u2028\u2029 \U0001f600", "price": Decimal("12.50"), "id": uuid.UUID(int=7)},
    {"at": datetime.datetime(2026, 1, 2, 3, 4, 5, 600, tzinfo=datetime.UTC), "day": datetime.date(2026, 1, 2)},
    [1, 2.5, True, None, "x", {"nested": [{"deep": []}]}],
    None,
]


@pytest.mark.parametrize("value", VALUES)
def test_the_renderer_writes_drfs_bytes(value):
    class DrfRenderer(renderers.JSONRenderer):  # DRF's, never indented, as the API's renderer
        def get_indent(self, accepted_media_type, renderer_context):
            return None

    assert JSONRenderer().render(value, "application/json", {}) == DrfRenderer().render(value, "application/json", {})


def test_a_view_keeps_its_own_classes_instances_and_allow_header():
    class Plain(ApiView):
        def get(self, request):
            raise NotImplementedError

    class Open(ApiView):
        permission_classes = [AllowAny]
        renderer_classes = [JSONRenderer, renderers.BrowsableAPIRenderer]

        def post(self, request):
            raise NotImplementedError

    plain, other_plain, opened = Plain(), Plain(), Open()
    assert plain.get_permissions() is other_plain.get_permissions()  # made once for the class
    assert [type(p) for p in opened.get_permissions()] == [AllowAny]
    assert plain.allow() == "GET, HEAD, OPTIONS"  # as DRF's: HEAD wherever GET
    assert opened.allow() == "POST, OPTIONS"


def test_a_body_nested_deeper_than_the_limit_is_refused_however_few_its_other_brackets():
    def parse(body):
        try:
            return JSONParser().parse(io.BytesIO(body), "application/json", {"encoding": "utf-8"})
        except ParseError:
            return "400"

    nested = lambda depth: b"[" * depth + b"]" * depth  # noqa: E731
    assert parse(nested(MAX_JSON_DEPTH)) != "400"  # at the limit: read
    assert parse(nested(MAX_JSON_DEPTH + 1)) == "400"
    assert parse(b'{"a":' * (MAX_JSON_DEPTH + 1) + b"1" + b"}" * (MAX_JSON_DEPTH + 1)) == "400"
    wide = b"[" + b"[]," * (5 * MAX_JSON_DEPTH) + b"[]]"  # many brackets, two levels: read
    assert parse(wide) == [[]] * (5 * MAX_JSON_DEPTH + 1)
    brackets_in_strings = b'["' + b"[" * (5 * MAX_JSON_DEPTH) + b'"]'  # control: brackets that open nothing
    assert parse(brackets_in_strings) == ["[" * (5 * MAX_JSON_DEPTH)]


def _leftover_cycles(send) -> int:
    """How many objects ``send()`` leaves that only the cyclic garbage collector can free (after a warm-up call)."""
    send()
    gc.collect()
    gc.disable()
    try:
        send()
        gc.set_debug(gc.DEBUG_SAVEALL)
        return gc.collect()
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


@pytest.fixture
def test_transaction_kept():
    """As Django's test client does: requests leave the test's transaction (and its connection) alone."""
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    yield
    for signal in (request_started, request_finished):
        signal.connect(close_old_connections)


@pytest.mark.django_db
def test_an_api_request_leaves_nothing_for_the_cyclic_garbage_collector(
    make_product, monkeypatch, test_transaction_kept
):
    handler = WSGIHandler()
    product = make_product(stock=3)
    factory = RequestFactory()

    def sender(request, status):
        def send():
            answered = []
            response = handler(request().environ, lambda line, headers, exc_info=None: answered.append(line))
            b"".join(response)
            response.close()  # as a WSGI server does (nothing in the test keeps the response either)
            assert answered[0].startswith(status)

        return send

    read = sender(lambda: factory.get(f"/v1/products/{product.pk}"), "200")
    refused = sender(lambda: factory.post("/v1/checkout", b"{}", content_type="application/json"), "401")  # an error
    assert [_leftover_cycles(read), _leftover_cycles(refused)] == [0, 0]
    # Control: Django's own setup (``self.head = self.get``) makes the view hold itself, and with it the request (its
    # body, headers ...) until the collector walks them.
    monkeypatch.setattr(ApiView, "setup", View.setup)
    assert _leftover_cycles(read) > 10


class Redirecting(ApiView):
    """A view whose answer is a plain Django response, as the payment page's redirect is."""

    permission_classes = [AllowAny]
    authentication_classes = []

    def get(self, request):
        return HttpResponseRedirect("https://gateway.example/pay")


@pytest.mark.django_db
def test_a_plain_django_answer_is_sent_and_leaves_nothing_for_the_cyclic_garbage_collector(
    monkeypatch, test_transaction_kept
):
    view = Redirecting.as_view()
    factory = RequestFactory()

    def send():
        response = view(factory.get("/pay"))
        assert (response.status_code, response["Location"]) == (302, "https://gateway.example/pay")
        response.close()

    assert _leftover_cycles(send) == 0
    monkeypatch.setattr(ApiView, "setup", View.setup)  # control
    assert _leftover_cycles(send) > 5


# What DRF's dispatch answers, the pipeline answers: the same status, body bytes and headers, for each step's refusal
# and in DRF's order (authentication before the method, so an unauthenticated PUT is a 401, not a 405).
COMPARED_HEADERS = ("Content-Type", "Allow", "WWW-Authenticate", "Retry-After", "ETag", "Cache-Control")


def _answers(view_class, request, **kwargs):
    """The pipeline's answer and DRF's (``bench.cpu.through_drf``: DRF's own dispatch before the same methods)."""
    ours = view_class.as_view()(request(), **kwargs)
    theirs = cpu.through_drf(view_class)(request(), **kwargs)
    return ours, theirs


def _same(ours, theirs):
    assert (ours.status_code, ours.content) == (theirs.status_code, theirs.content)
    assert {h: ours.get(h) for h in COMPARED_HEADERS} == {h: theirs.get(h) for h in COMPARED_HEADERS}


@pytest.mark.django_db
def test_every_step_answers_as_drfs_dispatch(customer, make_product):
    factory = RequestFactory()
    sold_out = make_product(stock=0)
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {customer.api_token}"}
    body = f'{{"items": [{{"product_id": {sold_out.pk}, "qty": 1}}]}}'
    json_type = "application/json"
    checkouts = {
        "refused (409)": lambda: factory.post("/v1/checkout", body, content_type=json_type, **bearer),
        "charset given": lambda: factory.post(
            "/v1/checkout", body, content_type=f"{json_type}; charset=utf-8", **bearer
        ),
        "no token (401)": lambda: factory.post("/v1/checkout", body, content_type=json_type),
        "unknown token (401)": lambda: factory.post(
            "/v1/checkout", body, content_type=json_type, HTTP_AUTHORIZATION="Bearer not-a-token"
        ),
        "malformed header (401)": lambda: factory.post(
            "/v1/checkout", body, content_type=json_type, HTTP_AUTHORIZATION="Bearer a b"
        ),
        "method (405)": lambda: factory.put("/v1/checkout", body, content_type=json_type, **bearer),
        "method before token (401)": lambda: factory.put("/v1/checkout", body, content_type=json_type),
        "not JSON (415)": lambda: factory.post("/v1/checkout", body, content_type="text/plain", **bearer),
        "bad JSON (400)": lambda: factory.post("/v1/checkout", "{", content_type=json_type, **bearer),
        "a form (415)": lambda: factory.post("/v1/checkout", **bearer),
        "no body (400)": lambda: factory.generic("POST", "/v1/checkout", b"", content_type=json_type, **bearer),
        "bad key (400)": lambda: factory.post(
            "/v1/checkout", body, content_type=json_type, HTTP_IDEMPOTENCY_KEY="\u00e9", **bearer
        ),
        "options": lambda: factory.options("/v1/checkout", **bearer),
    }
    statuses = {}
    for name, request in checkouts.items():
        ours, theirs = _answers(CheckoutApi, request)
        _same(ours, theirs)
        statuses[name] = ours.status_code
    assert statuses == {  # control: each case reached the step it names
        "refused (409)": 409, "charset given": 409, "no token (401)": 401, "unknown token (401)": 401,
        "malformed header (401)": 401, "method (405)": 405, "method before token (401)": 401, "not JSON (415)": 415,
        "bad JSON (400)": 400, "a form (415)": 415, "no body (400)": 400, "bad key (400)": 400, "options": 200,
    }  # fmt: skip

    product = make_product(stock=3)
    ours, _theirs = _answers(ProductDetailApi, lambda: factory.get("/"), product_id=product.pk)
    reads = {
        "get": lambda: factory.get("/"),
        "head": lambda: factory.head("/"),
        "not modified (304)": lambda: factory.get("/", HTTP_IF_NONE_MATCH=ours["ETag"]),
        "method (405)": lambda: factory.post("/", "{}", content_type=json_type),
    }
    for name, request in reads.items():
        ours, theirs = _answers(ProductDetailApi, request, product_id=product.pk)
        _same(ours, theirs)
        statuses[name] = ours.status_code
    assert [statuses[name] for name in reads] == [200, 200, 304, 405]
    ours, theirs = _answers(ProductDetailApi, lambda: factory.get("/"), product_id=product.pk + 1000)
    _same(ours, theirs)
    assert ours.status_code == 404
