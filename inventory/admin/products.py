"""Products in the admin: name, price, whether it is on sale and its sale window (start, end, sale price), and how
many stock buckets its units are spread over. The stock counters are shown, never edited. Stock managers
(``inventory.change_product``) edit the window; the database checks that it ends after it starts and that a sale
price has a window (docs/sale-windows.md). A new number of stock buckets is applied by
``inventory.services.stock_buckets_set``, which moves the units (docs/strategies.md#stock-buckets)."""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from inventory import catalogue, services
from inventory.admin.product_form import ProductVersionForm
from inventory.models import Inventory, Product
from skincare.admin_helpers import ReadOnlyAdminMixin


class InventoryInline(ReadOnlyAdminMixin, admin.StackedInline):
    """The product's counters, shown on the product page and never editable there."""

    model = Inventory
    can_delete = False
    extra = 0
    max_num = 1
    fields = ["available_stock", "reserved_stock", "version", "updated_at", "stock_links"]
    readonly_fields = fields

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("inventory.view_inventory") or request.user.has_perm("inventory.view_product")

    @admin.display(description="Stock")
    def stock_links(self, inventory: Inventory) -> SafeString:
        return format_html(
            '<a href="{}">Open the stock page</a> (adjust, count, ledger)',
            reverse("admin:inventory_inventory_change", args=[inventory.pk]),
        )


@admin.register(Product)
class ProductAdmin(admin.ModelAdmin):
    list_display = [
        "sku",
        "name",
        "price",
        "max_per_customer",
        "is_active",
        "inventory_strategy",
        "stock_buckets",
        "sale_starts_at",
        "sale_ends_at",
        "sale_price",
        "available_stock",
        "reserved_stock",
    ]
    list_display_links = ["sku", "name"]
    list_filter = ["is_active", "inventory_strategy"]
    search_fields = ["sku", "name"]
    list_select_related = ["inventory"]
    inlines = [InventoryInline]
    readonly_fields = ["created_at", "updated_at"]
    form = ProductVersionForm  # a stale page cannot write back an old window or price (product_form.py)

    def get_fields(self, request: HttpRequest, obj: Product | None = None) -> list[str]:
        fields = ["sku", "name", "price", "max_per_customer", "is_active", "inventory_strategy", "stock_buckets"]
        fields += ["sale_starts_at", "sale_ends_at", "sale_price"]
        return [*fields, *([] if obj is None else ["created_at", "updated_at", "loaded_version"])]

    def has_delete_permission(self, request: HttpRequest, obj: Product | None = None) -> bool:
        return False  # products are referenced by orders and the ledger; deactivate instead

    @admin.display(description="Available", ordering="inventory__available_stock")
    def available_stock(self, product: Product) -> int | None:
        inventory = getattr(product, "inventory", None)
        return inventory.available_stock if inventory else None

    @admin.display(description="Reserved", ordering="inventory__reserved_stock")
    def reserved_stock(self, product: Product) -> int | None:
        inventory = getattr(product, "inventory", None)
        return inventory.reserved_stock if inventory else None

    def save_model(self, request: HttpRequest, obj: Product, form: Any, change: bool) -> None:
        buckets = obj.stock_buckets
        if change:
            if "stock_buckets" not in form.changed_data:
                super().save_model(request, obj, form, change)
                return
            # The service moves the units and writes the new number; the form saves everything else. Fewer buckets
            # first (the strategy in the database still allows them), more buckets after a new strategy is saved.
            previous = form.initial["stock_buckets"]
            obj.stock_buckets = previous
            if buckets < previous:
                services.stock_buckets_set(product_id=obj.pk, buckets=buckets, actor=request.user)
                obj.stock_buckets = buckets
                super().save_model(request, obj, form, change)
            else:
                super().save_model(request, obj, form, change)
                services.stock_buckets_set(product_id=obj.pk, buckets=buckets, actor=request.user)
                obj.stock_buckets = buckets
            return
        # A new product gets its stock row through the service (stock 0; add stock with Adjust).
        created = catalogue.product_create(
            sku=obj.sku,
            name=obj.name,
            price=obj.price,
            is_active=obj.is_active,
            inventory_strategy=obj.inventory_strategy,
            max_per_customer=obj.max_per_customer,
            initial_stock=0,
            actor=request.user,
        )
        if obj.sale_starts_at or obj.sale_ends_at or obj.sale_price is not None:
            created = catalogue.product_sale_set(
                product_id=created.pk,
                starts_at=obj.sale_starts_at,
                ends_at=obj.sale_ends_at,
                sale_price=obj.sale_price,
                max_per_customer=obj.max_per_customer,
            )
        if buckets > 1:
            services.stock_buckets_set(product_id=created.pk, buckets=buckets, actor=request.user)
        obj.pk = created.pk
        obj.created_at, obj.updated_at = created.created_at, created.updated_at
        obj._state.adding = False
