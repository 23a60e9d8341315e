"""Waiting room endpoints: join a product's queue, read (poll) a pass. Thin: call a service or selector, render."""

from django.http import JsonResponse
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from skincare.api import authenticated_customer
from waitingroom import schemas, selectors, services
from waitingroom.exceptions import QueueNotFound


def poll_answer(queue_pass: selectors.PassView) -> JsonResponse:
    """A poll's answer, rendered by Django's JsonResponse rather than DRF's content negotiation and renderer: a poll
    is the most frequent request of a queued sale and must cost no more than a sold-out 409 (docs/queue.md)."""
    return JsonResponse(queue_pass.to_json())


class QueueApi(APIView):
    """``/v1/products/<id>/queue``: POST joins (201, or 200 with the existing pass), GET reads the customer's pass."""

    @schemas.QUEUE_JOIN
    def post(self, request: Request, product_id: int) -> Response:
        queue_pass, created = services.queue_join(customer=authenticated_customer(request), product_id=product_id)
        return Response(queue_pass.to_json(), status=201 if created else 200)

    @schemas.QUEUE_PASS_FOR_PRODUCT
    def get(self, request: Request, product_id: int) -> JsonResponse:
        queue_pass = selectors.pass_get(customer_id=authenticated_customer(request).pk, product_id=product_id)
        if queue_pass is None:
            raise QueueNotFound(product_id=product_id)
        return poll_answer(queue_pass)


class QueuePassApi(APIView):
    """``/v1/queue/passes/<id>``: the same body, by the pass's id (another customer's pass is a 404)."""

    @schemas.QUEUE_PASS
    def get(self, request: Request, pass_id: int) -> JsonResponse:
        queue_pass = selectors.pass_get(customer_id=authenticated_customer(request).pk, pass_id=pass_id)
        if queue_pass is None:
            raise QueueNotFound(pass_id=pass_id)
        return poll_answer(queue_pass)
