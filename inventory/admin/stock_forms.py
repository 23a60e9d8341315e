"""The two stock forms of the admin, as views of ``InventoryAdmin``. Each calls one ``inventory.services``
function and turns its domain errors into a message on the same form (409; 503 with ``Retry-After`` when the stock
rows stayed locked past the lock timeout, e.g. by checkouts in a sale) or a 404."""

import functools
from typing import Any, Protocol

from django.contrib import messages
from django.contrib.admin import AdminSite
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.safestring import SafeString

from inventory import services
from inventory.exceptions import ProductNotFound, StaleStockVersion, StockWouldGoNegative
from inventory.forms import AdjustStockForm, SetCountedStockForm
from inventory.models import Inventory
from skincare.errors import ServiceBusy


class StockAdmin(Protocol):
    """What a stock form needs of its admin (``inventory.admin.stock.InventoryAdmin``, which imports this module)."""

    admin_site: AdminSite
    model: type[Inventory]

    def recent_ledger(self, inventory: Inventory) -> SafeString: ...


ADJUST_PERMISSION = "inventory.adjust_stock"
STALE_MESSAGE = "Stock changed while you were editing"


def can_adjust_stock(request: HttpRequest) -> bool:
    return request.user.is_active and request.user.has_perm(ADJUST_PERMISSION)


def _inventory_or_404(product_id: int) -> Inventory:
    inventory = Inventory.objects.select_related("product").filter(product_id=product_id).first()
    if inventory is None:
        raise Http404(f"No inventory for product {product_id}.")
    return inventory


def _render(
    model_admin: StockAdmin,
    request: HttpRequest,
    *,
    template: str,
    title: str,
    inventory: Inventory,
    form: Any,
    status: int = 200,
) -> TemplateResponse:
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.model._meta,
        "title": title,
        "subtitle": str(inventory.product),
        "inventory": inventory,
        "form": form,
        "change_url": reverse("admin:inventory_inventory_change", args=[inventory.pk]),
        "recent_ledger": model_admin.recent_ledger(inventory),
    }
    return TemplateResponse(request, template, context, status=status)


def _busy(render: Any, request: HttpRequest, product_id: int, form: Any, exc: ServiceBusy) -> TemplateResponse:
    """The stock rows stayed locked past the lock timeout (the runner gave up): nothing was written, say so on the
    same form, which keeps what was typed."""
    messages.error(
        request, "The stock is busy right now (checkouts hold it); nothing was changed. Try again in a moment."
    )
    response = render(inventory=_inventory_or_404(product_id), form=form, status=exc.http_status)
    response["Retry-After"] = str(exc.retry_after)
    return response


def adjust_view(model_admin: StockAdmin, request: HttpRequest, product_id: int) -> HttpResponse:
    if not can_adjust_stock(request):
        raise PermissionDenied
    render = functools.partial(
        _render, model_admin, request, template="admin/inventory/inventory/adjust_stock.html", title="Adjust stock"
    )
    inventory = _inventory_or_404(product_id)
    form = AdjustStockForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        delta = form.cleaned_data["delta"]
        try:
            inventory = services.stock_adjust(
                product_id=inventory.pk, delta=delta, note=form.cleaned_data["note"], actor=request.user
            )
        except StockWouldGoNegative:
            inventory = _inventory_or_404(product_id)
            messages.error(
                request,
                f"Refused: {inventory.available_stock} units are available, so a change of {delta:+d} would push "
                "available stock below zero. Nothing was changed.",
            )
            return render(inventory=inventory, form=form, status=409)
        except ServiceBusy as exc:
            return _busy(render, request, product_id, form, exc)
        except ProductNotFound:
            raise Http404(f"No inventory for product {product_id}.") from None
        messages.success(
            request,
            f"Adjusted {inventory.product.sku} by {delta:+d}: {inventory.available_stock} available, "
            f"{inventory.reserved_stock} reserved.",
        )
        return redirect("admin:inventory_inventory_change", inventory.pk)
    return render(inventory=inventory, form=form)


def set_counted_view(model_admin: StockAdmin, request: HttpRequest, product_id: int) -> HttpResponse:
    if not can_adjust_stock(request):
        raise PermissionDenied
    render = functools.partial(
        _render, model_admin, request, template="admin/inventory/inventory/set_counted.html", title="Set counted stock"
    )
    inventory = _inventory_or_404(product_id)
    if request.method != "POST":
        form = SetCountedStockForm(initial={"version": inventory.version})
        return render(inventory=inventory, form=form)
    form = SetCountedStockForm(request.POST)
    if not form.is_valid():
        return render(inventory=inventory, form=form)
    counted, version = form.cleaned_data["counted"], form.cleaned_data["version"]
    try:
        before = inventory.available_stock
        inventory = services.stock_set_counted(
            product_id=inventory.pk,
            counted=counted,
            expected_version=version,
            note=form.cleaned_data["note"],
            actor=request.user,
        )
    except StaleStockVersion:
        inventory = _inventory_or_404(product_id)
        messages.error(
            request,
            f"{STALE_MESSAGE}: the form was loaded at version {version}, the stock is now at version "
            f"{inventory.version} ({inventory.available_stock} available, {inventory.reserved_stock} reserved). "
            "Nothing was saved. Check the current figures and enter your count again.",
        )
        # A fresh form with the current version: the count has to be typed again against current figures.
        fresh = SetCountedStockForm(initial={"version": inventory.version, "note": form.cleaned_data["note"]})
        return render(inventory=inventory, form=fresh, status=409)
    except ServiceBusy as exc:
        return _busy(render, request, product_id, form, exc)
    except ProductNotFound:
        raise Http404(f"No inventory for product {product_id}.") from None
    if counted == before and inventory.version == version:
        messages.info(request, f"No change: {inventory.product.sku} already has {counted} available.")
    else:
        messages.success(
            request,
            f"Counted stock of {inventory.product.sku} saved: {inventory.available_stock} available "
            f"({inventory.available_stock - before:+d}), {inventory.reserved_stock} reserved.",
        )
    return redirect("admin:inventory_inventory_change", inventory.pk)
