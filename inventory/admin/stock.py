"""The stock counters' admin: read-only rows, links to the two service-backed forms, the latest ledger rows."""

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from inventory.admin import stock_forms
from inventory.admin.ledger import ledger_table
from inventory.models import Inventory, StockMovement

LEDGER_ROWS_ON_PAGE = 20


class LowStockFilter(admin.SimpleListFilter):
    title = "low stock"
    parameter_name = "available_lte"
    THRESHOLDS = (0, 5, 10, 25, 50, 100)

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [(str(n), "sold out" if n == 0 else f"≤ {n} available") for n in self.THRESHOLDS]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Inventory]) -> QuerySet[Inventory]:
        if self.value() is None:
            return queryset
        try:
            threshold = int(self.value())
        except ValueError:
            raise admin.options.IncorrectLookupParameters(f"low stock: {self.value()!r} is not a number") from None
        return queryset.filter(available_stock__lte=threshold)


@admin.register(Inventory)
class InventoryAdmin(admin.ModelAdmin):
    """Stock counters: read-only, with the two service-backed forms as custom admin views. The orders app registers
    a subclass with an "active reservations" filter in its place (``orders.admin``; inventory never imports orders)."""

    list_display = [
        "product_id",
        "sku",
        "product_name",
        "available_stock",
        "reserved_stock",
        "version",
        "updated_at",
    ]
    list_display_links = ["product_id", "sku"]
    list_select_related = ["product"]
    search_fields = ["product__sku", "product__name"]
    list_filter = [LowStockFilter]
    ordering = ["product_id"]
    fields = ["product", "available_stock", "reserved_stock", "version", "updated_at", "recent_ledger"]
    readonly_fields = fields

    # Nobody edits counters as fields, not even a superuser; see the package docstring.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_list_display(self, request: HttpRequest) -> Any:
        if stock_forms.can_adjust_stock(request):
            return [*self.list_display, "stock_actions"]
        return self.list_display

    @admin.display(description="SKU", ordering="product__sku")
    def sku(self, inventory: Inventory) -> str:
        return inventory.product.sku

    @admin.display(description="Product", ordering="product__name")
    def product_name(self, inventory: Inventory) -> str:
        return inventory.product.name

    @admin.display(description="Stock actions")
    def stock_actions(self, inventory: Inventory) -> SafeString:
        return format_html(
            '<a href="{}">Adjust</a> | <a href="{}">Set counted</a>',
            reverse("admin:inventory_inventory_adjust", args=[inventory.pk]),
            reverse("admin:inventory_inventory_set_counted", args=[inventory.pk]),
        )

    @admin.display(description=f"Latest ledger rows (up to {LEDGER_ROWS_ON_PAGE})")
    def recent_ledger(self, inventory: Inventory) -> SafeString:
        movements = StockMovement.objects.filter(product_id=inventory.pk).select_related("actor")
        table = ledger_table(movements.order_by("-id")[:LEDGER_ROWS_ON_PAGE])
        link = reverse("admin:inventory_stockmovement_changelist") + f"?product__id__exact={inventory.pk}"
        return format_html('{}<p><a href="{}">All ledger rows of this product</a></p>', table, link)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra_context = {**(extra_context or {}), "can_adjust_stock": stock_forms.can_adjust_stock(request)}
        return super().change_view(request, object_id, form_url, extra_context)

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view  # staff only: anyone else is sent to the login page
        return [
            path(
                "<int:product_id>/adjust/",
                wrap(lambda request, product_id: stock_forms.adjust_view(self, request, product_id)),
                name="inventory_inventory_adjust",
            ),
            path(
                "<int:product_id>/set-counted/",
                wrap(lambda request, product_id: stock_forms.set_counted_view(self, request, product_id)),
                name="inventory_inventory_set_counted",
            ),
            *super().get_urls(),
        ]
