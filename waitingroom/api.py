"""Waiting room endpoints: join a product's queue, read (poll) a pass. Thin: call a service or selector, render.

The join's answer carries the signed pass (``pass_token``, also set as a cookie) and where to poll with it
(``poll_url``, sending the token in the ``Queue-Pass`` header or the cookie): such a poll is answered without the
database while the pass waits (``waitingroom.selectors.pass_poll``)."""

from typing import Any

from django.conf import settings
from django.http import HttpRequest

from skincare.api import ApiRequest, ApiResponse, authenticated_customer
from skincare.apiview import ApiView
from waitingroom import passtoken, schemas, selectors, services
from waitingroom.exceptions import QueueNotFound, QueuePassInvalid
from waitingroom.passtoken import SignedPass


def signed_answer(queue_pass: selectors.PassView, customer_id: int) -> tuple[dict[str, Any], str]:
    """The pass's body with its signed copy and where to poll with it; and the token (for the cookie)."""
    token = passtoken.pass_sign(
        SignedPass(
            pass_id=queue_pass.pass_id,
            product_id=queue_pass.product_id,
            customer_id=customer_id,
            position=queue_pass.position,
            queue_created_us=queue_pass.queue_created_us,
            joined_us=queue_pass.joined_us,
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


def pass_token_sent(request: HttpRequest, pass_id: int) -> str | None:
    """The signed pass a poll carries: the Queue-Pass header, else the cookie the join set; None without one."""
    token = request.META.get(passtoken.META_HEADER)
    if token is None:
        token = request.COOKIES.get(f"{passtoken.COOKIE_PREFIX}{pass_id}")
    return token


class QueueApi(ApiView):
    """``/v1/products/<id>/queue``: POST joins (201, or 200 with the existing pass), GET reads the customer's pass."""

    @schemas.QUEUE_JOIN
    def post(self, request: ApiRequest, product_id: int) -> ApiResponse:
        customer = authenticated_customer(request)
        queue_pass, created = services.queue_join(customer=customer, product_id=product_id)
        body, token = signed_answer(queue_pass, customer.pk)
        response = ApiResponse(body, status=201 if created else 200)
        set_pass_cookie(response, queue_pass.pass_id, token)
        return response

    @schemas.QUEUE_PASS_FOR_PRODUCT
    def get(self, request: ApiRequest, product_id: int) -> ApiResponse:
        queue_pass = selectors.pass_get(customer_id=authenticated_customer(request).pk, product_id=product_id)
        if queue_pass is None:
            raise QueueNotFound(product_id=product_id)
        return ApiResponse(queue_pass.to_json())


class QueuePassApi(ApiView):
    """``/v1/queue/passes/<id>``: the same body, by the pass's id (another customer's pass is a 404). With the
    signed pass (header or cookie) a waiting pass is answered without the database; a signed pass that is forged
    or another customer's is refused (403 ``queue_pass_invalid``), a pass of a queue since reset or re-created is
    gone (410 ``queue_pass_outdated``), a pass that no longer exists is a 404; an answer
    that places the pass since it was signed carries a new signed pass (body and cookie)."""

    @schemas.QUEUE_PASS
    def get(self, request: ApiRequest, pass_id: int) -> ApiResponse:
        customer_id = authenticated_customer(request).pk
        token = pass_token_sent(request.http, pass_id)
        if token is None:
            queue_pass = selectors.pass_get(customer_id=customer_id, pass_id=pass_id)
            if queue_pass is None:
                raise QueueNotFound(pass_id=pass_id)
            return ApiResponse(queue_pass.to_json())
        signed = passtoken.pass_verify(token=token, customer_id=customer_id, pass_id=pass_id)
        if signed is None:
            raise QueuePassInvalid(pass_id=pass_id)
        queue_pass = selectors.pass_poll(signed=signed) or services.queue_pass_recover(signed=signed)
        if queue_pass is None:
            raise QueueNotFound(pass_id=pass_id)
        if queue_pass.position == signed.position and queue_pass.pass_id == pass_id:
            return ApiResponse(queue_pass.to_json())
        # placed since it was signed, or the customer's pass kept instead of this one: a new signed pass
        body, new_token = signed_answer(queue_pass, customer_id)
        response = ApiResponse(body)
        set_pass_cookie(response, queue_pass.pass_id, new_token)
        return response
