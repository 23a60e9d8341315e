"""One request path: every endpoint is a ``skincare.apiview.ApiView`` (DRF's dispatch), and what the view class keeps
for every request (the parser and renderer that read and write in one call, the instances, the ``Allow`` header) gives
what DRF's own classes give."""

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
from rest_framework import parsers, renderers
from rest_framework.exceptions import ParseError
from rest_framework.permissions import AllowAny
from rest_framework.views import APIView

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
    assert [type(r) for r in opened.get_renderers()] == [JSONRenderer, renderers.BrowsableAPIRenderer]
    assert plain.default_response_headers == {"Allow": "GET, OPTIONS"}
    assert opened.default_response_headers == {"Allow": "POST, OPTIONS", "Vary": "Accept"}
    plain.default_response_headers["Allow"] = "changed"  # a copy: a view's answer may change its own
    assert other_plain.default_response_headers == {"Allow": "GET, OPTIONS"}


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

    answers = [
        sender(lambda: factory.get(f"/v1/products/{product.pk}"), "200"),
        sender(lambda: factory.post("/v1/checkout", b"{}", content_type="application/json"), "401"),  # an error
    ]
    assert [_leftover_cycles(send) for send in answers] == [0, 0]
    # Control: without the release after rendering, DRF's view, request and response hold each other (and the
    # request's body, headers ...) until the collector walks them.
    monkeypatch.setattr(ApiView, "_release_cycles", lambda self, response: None)
    assert all(_leftover_cycles(send) > 10 for send in answers)


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
    monkeypatch.setattr(ApiView, "_release_cycles", lambda self, response: None)  # control
    assert _leftover_cycles(send) > 5
