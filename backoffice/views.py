"""The sale board: one admin page (``admin:orders_sale_board``) that fetches ``admin:orders_sale_board_data``
every ``REFRESH_MS`` and redraws itself, without reloading. Staff with ``orders.view_order`` (the "Ops viewers"
and "Stock managers" groups have it). What each number is and where it comes from: :mod:`orders.saleboard`."""

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from orders import saleboard

REFRESH_MS = 2000
PERMISSION = "orders.view_order"


def _pinned(request: HttpRequest) -> list[int]:
    """``?product=101&product=102``: always shown, whatever their window (non-numbers are ignored)."""
    return [int(v) for v in request.GET.getlist("product") if v.isdigit() and len(v) < 10]


def board_view(model_admin: admin.ModelAdmin, request: HttpRequest) -> HttpResponse:
    if not request.user.has_perm(PERMISSION):
        raise PermissionDenied
    query = request.META.get("QUERY_STRING", "")
    context = {
        **model_admin.admin_site.each_context(request),
        "title": "Sale board",
        "opts": model_admin.model._meta,
        "data_url": reverse("admin:orders_sale_board_data") + (f"?{query}" if query else ""),
        "refresh_ms": REFRESH_MS,
        "series_seconds": saleboard.SERIES_SECONDS,
    }
    return TemplateResponse(request, "admin/orders/saleboard.html", context)


def board_data_view(request: HttpRequest) -> HttpResponse:
    if not request.user.has_perm(PERMISSION):
        return JsonResponse({"error": "Forbidden.", "code": "forbidden"}, status=403)
    response = JsonResponse(saleboard.board(pinned=_pinned(request)))
    response["Cache-Control"] = "no-store"
    return response
