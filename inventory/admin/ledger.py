"""The stock ledger in the admin: its own read-only changelist, and the table of ledger rows that the stock
page and the order page show."""

from collections.abc import Iterable

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.utils.safestring import SafeString, mark_safe

from inventory.models import StockMovement
from skincare.admin_helpers import ReadOnlyAdminMixin


def ledger_table(
    movements: Iterable[StockMovement], *, show_product: bool = False, show_order: bool = True
) -> SafeString:
    """An HTML table of ledger rows (template ``admin/inventory/ledger_rows.html``, autoescaped)."""
    html = render_to_string(
        "admin/inventory/ledger_rows.html",
        {"movements": list(movements), "show_product": show_product, "show_order": show_order},
    )
    return mark_safe(html.strip())  # noqa: S308 - rendered by the template engine with autoescaping on


class ReasonFilter(admin.SimpleListFilter):
    title = "kind"
    parameter_name = "kind"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [("manual", "Manual (adjustment, count)"), ("orders", "Orders (reserve, consume, expire, cancel)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[StockMovement]) -> QuerySet[StockMovement]:
        manual = Q(reason__in=[StockMovement.Reason.ADJUSTMENT, StockMovement.Reason.COUNT])
        if self.value() == "manual":
            return queryset.filter(manual)
        if self.value() == "orders":
            return queryset.filter(order_id__isnull=False)
        return queryset


@admin.register(StockMovement)
class StockMovementAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """The ledger. Append-only in the database (a trigger rejects UPDATE and DELETE), read-only here."""

    list_display = [
        "id",
        "created_at",
        "product",
        "reason",
        "available_delta",
        "reserved_delta",
        "order_id",
        "actor",
        "note",
    ]
    list_filter = ["reason", ReasonFilter, "created_at"]
    list_select_related = ["product", "actor"]
    search_fields = ["product__sku", "product__name", "note", "=order_id"]
    show_full_result_count = False  # the ledger grows fast; skip the extra COUNT(*)

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        # Links from the stock and order pages filter the ledger by product or by order.
        if lookup in ("product__id__exact", "order_id__exact", "order_id"):
            return True
        return super().lookup_allowed(lookup, value, request)
