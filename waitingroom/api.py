"""Waiting room endpoints: join a product's queue, read (poll) a pass. Thin: call a service or selector, render.

The join's answer carries the signed pass (``pass_token``, also set as a cookie) and where to poll with it
(``poll_url``, sending the token in the ``Queue-Pass`` header or the cookie): such a poll is answered without the
database while the pass waits (``waitingroom.selectors.pass_poll``)."""

import json
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from rest_framework.request import Request
from rest_framework.response import Response

from skincare.api import authenticated_customer, bearer_customer
from skincare.apiview import ApiView
from waitingroom import passtoken, schemas, selectors, services
from waitingroom.exceptions import QueueNotFound, QueuePassInvalid
from waitingroom.passtoken import SignedPass

# Compact, not ASCII-escaped, no NaN: as the API's renderer writes a body of strings, numbers, booleans and nulls.
ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def signed_answer(queue_pass: selectors.PassView, customer_id: int) -> tuple[dict[str, Any], str]:
    """The pass's body with its signed copy and where to poll with it; and the token (for the cookie)."""
    token = passtoken.pass_sign(
        SignedPass(
            pass_id=queue_pass.pass_id,
            product_id=queue_pass.product_id,
            customer_id=customer_id,
            position=queue_pass.position,
        )
    )
    body = queue_pass.to_json()
    body.update(pass_token=token, poll_url=f"/v1/queue/passes/{queue_pass.pass_id}", poll_header=passtoken.HEADER)
    return body, token


def set_pass_cookie(response: Any, pass_id: int, token: str) -> None:
    response.set_cookie(
        f"{passtoken.COOKIE_PREFIX}{pass_id}",
        token,
        max_age=settings.QUEUE_OPENS_BEFORE_SECONDS + 86400,
        path=f"/v1/queue/passes/{pass_id}",
        secure=not settings.DEBUG,
        httponly=True,
        samesite="Strict",
    )


def poll_answer(queue_pass: selectors.PassView) -> HttpResponse:
    return json_answer(queue_pass.to_json())


def json_answer(body: dict[str, Any]) -> HttpResponse:
    """A poll's answer: the bytes the API's renderer (``skincare.api.JSONRenderer``) makes of its plain values,
    without DRF's content negotiation and without building an encoder per answer: a poll is the most frequent
    request of a queued sale and must cost about what /healthz costs (docs/queue.md#polling)."""
    return HttpResponse(ENCODER.encode(body).encode(), content_type="application/json")


def pass_token_sent(request: HttpRequest, pass_id: int) -> str | None:
    """The signed pass a poll carries: the Queue-Pass header, else the cookie the join set; None without one."""
    token = request.META.get(passtoken.META_HEADER)
    if token is None:
        token = request.COOKIES.get(f"{passtoken.COOKIE_PREFIX}{pass_id}")
    return token


class QueueApi(ApiView):
    """``/v1/products/<id>/queue``: POST joins (201, or 200 with the existing pass), GET reads the customer's pass."""

    @schemas.QUEUE_JOIN
    def post(self, request: Request, product_id: int) -> Response:
        customer = authenticated_customer(request)
        queue_pass, created = services.queue_join(customer=customer, product_id=product_id)
        body, token = signed_answer(queue_pass, customer.pk)
        response = Response(body, status=201 if created else 200)
        set_pass_cookie(response, queue_pass.pass_id, token)
        return response

    @schemas.QUEUE_PASS_FOR_PRODUCT
    def get(self, request: Request, product_id: int) -> HttpResponse:
        queue_pass = selectors.pass_get(customer_id=authenticated_customer(request).pk, product_id=product_id)
        if queue_pass is None:
            raise QueueNotFound(product_id=product_id)
        return poll_answer(queue_pass)


def signed_poll_answer(*, customer_id: int, pass_id: int, token: str) -> HttpResponse:
    """A poll with a signed pass: QueuePassInvalid for a forged or another customer's pass, QueueNotFound for a pass
    that no longer exists; a new token (body and cookie) when the answer places the pass."""
    signed = passtoken.pass_verify(token=token, customer_id=customer_id, pass_id=pass_id)
    if signed is None:
        raise QueuePassInvalid(pass_id=pass_id)
    queue_pass = selectors.pass_poll(signed=signed)
    if queue_pass is None:
        raise QueueNotFound(pass_id=pass_id)
    if queue_pass.position == signed.position:
        return poll_answer(queue_pass)
    body, new_token = signed_answer(queue_pass, customer_id)  # placed since it was signed: a new signed pass
    response = json_answer(body)
    set_pass_cookie(response, pass_id, new_token)
    return response


class QueuePassApi(ApiView):
    """``/v1/queue/passes/<id>``: the same body, by the pass's id (another customer's pass is a 404). With the
    signed pass (header or cookie) a waiting pass is answered without the database; a signed pass that is forged
    or another customer's is refused (403 ``queue_pass_invalid``).

    A GET with a signed pass, the most frequent request of a queued sale, is answered without DRF's request wrapper,
    content negotiation and permission classes (:meth:`dispatch`): the same bearer authentication
    (``skincare.api.bearer_customer``), the same body and headers, and any error answered as DRF's dispatch answers
    it (:meth:`error_answer`: the project's one exception handler and renderer)."""

    @schemas.QUEUE_PASS
    def get(self, request: Request, pass_id: int) -> HttpResponse:
        customer_id = authenticated_customer(request).pk
        token = pass_token_sent(request, pass_id)
        if token is not None:
            return signed_poll_answer(customer_id=customer_id, pass_id=pass_id, token=token)
        queue_pass = selectors.pass_get(customer_id=customer_id, pass_id=pass_id)
        if queue_pass is None:
            raise QueueNotFound(pass_id=pass_id)
        return poll_answer(queue_pass)

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        pass_id = kwargs["pass_id"]
        token = pass_token_sent(request, pass_id) if request.method == "GET" else None
        if token is None:
            return super().dispatch(request, *args, **kwargs)
        try:
            customer = bearer_customer(request)
            response = signed_poll_answer(customer_id=customer.pk, pass_id=pass_id, token=token)
        except Exception as exc:
            return self.error_answer(request, exc)
        for name, value in self.default_response_headers.items():  # Allow, as DRF's dispatch sets it
            response[name] = value
        return response

    def error_answer(self, request: HttpRequest, exc: Exception) -> HttpResponseBase:
        """What DRF's dispatch answers when ``exc`` is raised: the exception handler's response, rendered."""
        self.request = drf_request = self.initialize_request(request, *self.args, **self.kwargs)
        self.headers = self.default_response_headers
        return self.finalize_response(drf_request, self.handle_exception(exc), *self.args, **self.kwargs)
