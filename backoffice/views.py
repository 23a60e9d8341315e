"""The sale board: one admin page (``sale-board``) that fetches ``sale-board-data`` every ``REFRESH_MS`` and
redraws itself, without reloading. Staff with ``orders.view_order`` (the "Ops viewers" and "Stock managers" groups
have it); anyone else gets the project's 403 (``skincare.api.permission_denied``: the API's error body). What each
number is and where it comes from: :mod:`backoffice.saleboard`."""

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from backoffice import saleboard
from orders.models import Order
from skincare.errors import error_response
from skincare.validation import BIGINT_MAX

REFRESH_MS = 2000
PERMISSION = "orders.view_order"


def _pinned(request: HttpRequest) -> list[int] | None:
    """``?product=101&product=102``: always shown, whatever their window. None when one of them is not a product id
    (a whole number in 1 … 2^63 - 1)."""
    values = request.GET.getlist("product")
    ids = [int(v) for v in values if v.isascii() and v.isdigit() and len(v) <= len(str(BIGINT_MAX))]
    if len(ids) != len(values) or not all(0 < i <= BIGINT_MAX for i in ids):
        return None
    return ids


def _require_permission(request: HttpRequest) -> None:
    if not request.user.has_perm(PERMISSION):
        raise PermissionDenied


def board_view(request: HttpRequest) -> HttpResponse:
    _require_permission(request)
    query = request.META.get("QUERY_STRING", "")
    context = {
        **admin.site.each_context(request),
        "title": "Sale board",
        "opts": Order._meta,
        "data_url": reverse("sale-board-data") + (f"?{query}" if query else ""),
        "refresh_ms": REFRESH_MS,
        "series_seconds": saleboard.SERIES_SECONDS,
    }
    return TemplateResponse(request, "backoffice/saleboard.html", context)


def board_data_view(request: HttpRequest) -> HttpResponse:
    _require_permission(request)
    pinned = _pinned(request)
    if pinned is None:
        return error_response(
            "The request is invalid.",
            "invalid_request",
            http_status=400,
            fields={"product": [f"each a product id: a whole number in 1 … {BIGINT_MAX}"]},
        )
    response = JsonResponse(saleboard.board(pinned=pinned))
    response["Cache-Control"] = "no-store"
    return response
