"""Ops admin for products, stock counters and the stock ledger.

Stock is never an editable model field here. The counters are read-only everywhere; the only way to change
them is one of two forms that call ``inventory.services``:

* *Adjust* (``stock_adjust``): a signed delta applied with an F-expression, refused if available stock would
  go below zero;
* *Set counted stock* (``stock_set_counted``): an absolute figure, accepted only if the inventory row still
  has the ``version`` the form was loaded with.

Both need the ``inventory.adjust_stock`` permission (group "Stock managers"); anyone else gets 403.
"""

import functools

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import Http404
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from inventory import services
from inventory.exceptions import ProductNotFound, StaleStockVersion, StockWouldGoNegative
from inventory.forms import AdjustStockForm, SetCountedStockForm
from inventory.models import Inventory, Product, StockMovement

ADJUST_PERMISSION = "inventory.adjust_stock"
STALE_MESSAGE = "Stock changed while you were editing"
LEDGER_ROWS_ON_PAGE = 20


def can_adjust_stock(request):
    return request.user.is_active and request.user.has_perm(ADJUST_PERMISSION)


class ReadOnlyAdminMixin:
    """Visible to users with the view permission; nobody can add, change or delete through the admin."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyInline(ReadOnlyAdminMixin, admin.TabularInline):
    extra = 0
    max_num = 0
    show_change_link = False

    def get_readonly_fields(self, request, obj=None):
        return self.fields or [f.name for f in self.model._meta.fields]


def ledger_table(movements, *, show_product=False, show_order=True):
    """An HTML table of ledger rows, for read-only fields on change pages."""
    movements = list(movements)
    if not movements:
        return "No ledger rows."
    headers = ["#", "When", "Reason"]
    if show_product:
        headers.append("Product")
    headers += ["Available", "Reserved"]
    if show_order:
        headers.append("Order")
    headers += ["By", "Note"]

    def cells(m):
        row = [m.pk, m.created_at.strftime("%Y-%m-%d %H:%M:%S"), m.get_reason_display()]
        if show_product:
            row.append(m.product.sku)
        row += [f"{m.available_delta:+d}", f"{m.reserved_delta:+d}"]
        if show_order:
            row.append(m.order_id or "")
        row += [m.actor.get_username() if m.actor else "", m.note]
        return format_html_join("", "<td>{}</td>", ((c,) for c in row))

    return format_html(
        '<table class="ledger-rows"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>',
        format_html_join("", "<th>{}</th>", ((h,) for h in headers)),
        format_html_join(
            "", '<tr class="ledger-row" data-ledger-id="{}">{}</tr>', ((m.pk, cells(m)) for m in movements)
        ),
    )


class InventoryInline(ReadOnlyAdminMixin, admin.StackedInline):
    """The product's counters, shown on the product page and never editable there."""

    model = Inventory
    can_delete = False
    extra = 0
    max_num = 1
    fields = ["available_stock", "reserved_stock", "version", "updated_at", "stock_links"]
    readonly_fields = fields

    def has_view_permission(self, request, obj=None):
        return request.user.has_perm("inventory.view_inventory") or request.user.has_perm("inventory.view_product")

    @admin.display(description="Stock")
    def stock_links(self, inventory):
        return format_html(
            '<a href="{}">Open the stock page</a> (adjust, count, ledger)',
            reverse("admin:inventory_inventory_change", args=[inventory.pk]),
        )


@admin.register(Product)
class ProductAdmin(admin.ModelAdmin):
    list_display = ["sku", "name", "price", "is_active", "available_stock", "reserved_stock"]
    list_display_links = ["sku", "name"]
    list_filter = ["is_active"]
    search_fields = ["sku", "name"]
    list_select_related = ["inventory"]
    inlines = [InventoryInline]
    readonly_fields = ["created_at", "updated_at"]

    def get_fields(self, request, obj=None):
        return ["sku", "name", "price", "is_active", *([] if obj is None else ["created_at", "updated_at"])]

    def has_delete_permission(self, request, obj=None):
        return False  # products are referenced by orders and the ledger; deactivate instead

    @admin.display(description="Available", ordering="inventory__available_stock")
    def available_stock(self, product):
        inventory = getattr(product, "inventory", None)
        return inventory.available_stock if inventory else None

    @admin.display(description="Reserved", ordering="inventory__reserved_stock")
    def reserved_stock(self, product):
        inventory = getattr(product, "inventory", None)
        return inventory.reserved_stock if inventory else None

    def save_model(self, request, obj, form, change):
        if change:
            super().save_model(request, obj, form, change)
            return
        # A new product gets its inventory row through the service (stock 0; add stock with Adjust).
        created = services.product_create(
            sku=obj.sku, name=obj.name, price=obj.price, is_active=obj.is_active, initial_stock=0, actor=request.user
        )
        obj.pk = created.pk
        obj.created_at, obj.updated_at = created.created_at, created.updated_at
        obj._state.adding = False


class LowStockFilter(admin.SimpleListFilter):
    title = "low stock"
    parameter_name = "available_lte"
    THRESHOLDS = (0, 5, 10, 25, 50, 100)

    def lookups(self, request, model_admin):
        return [(str(n), "sold out" if n == 0 else f"≤ {n} available") for n in self.THRESHOLDS]

    def queryset(self, request, queryset):
        if self.value() is None:
            return queryset
        try:
            threshold = int(self.value())
        except ValueError:
            raise admin.options.IncorrectLookupParameters(f"low stock: {self.value()!r} is not a number") from None
        return queryset.filter(available_stock__lte=threshold)


@admin.register(Inventory)
class InventoryAdmin(admin.ModelAdmin):
    """Stock counters: read-only, with the two service-backed forms as custom admin views."""

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

    # Nobody edits counters as fields, not even a superuser; see the module docstring.
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def get_list_display(self, request):
        if can_adjust_stock(request):
            return [*self.list_display, "stock_actions"]
        return self.list_display

    @admin.display(description="SKU", ordering="product__sku")
    def sku(self, inventory):
        return inventory.product.sku

    @admin.display(description="Product", ordering="product__name")
    def product_name(self, inventory):
        return inventory.product.name

    @admin.display(description="Stock actions")
    def stock_actions(self, inventory):
        return format_html(
            '<a href="{}">Adjust</a> | <a href="{}">Set counted</a>',
            reverse("admin:inventory_inventory_adjust", args=[inventory.pk]),
            reverse("admin:inventory_inventory_set_counted", args=[inventory.pk]),
        )

    @admin.display(description=f"Latest ledger rows (up to {LEDGER_ROWS_ON_PAGE})")
    def recent_ledger(self, inventory):
        movements = StockMovement.objects.filter(product_id=inventory.pk).select_related("actor")
        table = ledger_table(movements.order_by("-id")[:LEDGER_ROWS_ON_PAGE])
        link = reverse("admin:inventory_stockmovement_changelist") + f"?product__id__exact={inventory.pk}"
        return format_html('{}<p><a href="{}">All ledger rows of this product</a></p>', table, link)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = {**(extra_context or {}), "can_adjust_stock": can_adjust_stock(request)}
        return super().change_view(request, object_id, form_url, extra_context)

    def get_urls(self):
        wrap = self.admin_site.admin_view  # staff only: anyone else is sent to the login page
        return [
            path("<int:product_id>/adjust/", wrap(self.adjust_view), name="inventory_inventory_adjust"),
            path("<int:product_id>/set-counted/", wrap(self.set_counted_view), name="inventory_inventory_set_counted"),
            *super().get_urls(),
        ]

    # -- the two stock forms -------------------------------------------------------------------------------

    def _inventory_or_404(self, product_id):
        inventory = Inventory.objects.select_related("product").filter(product_id=product_id).first()
        if inventory is None:
            raise Http404(f"No inventory for product {product_id}.")
        return inventory

    def _render(self, request, *, template, title, inventory, form, status=200):
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": title,
            "subtitle": str(inventory.product),
            "inventory": inventory,
            "form": form,
            "change_url": reverse("admin:inventory_inventory_change", args=[inventory.pk]),
            "recent_ledger": self.recent_ledger(inventory),
        }
        return TemplateResponse(request, template, context, status=status)

    def adjust_view(self, request, product_id):
        if not can_adjust_stock(request):
            raise PermissionDenied
        render = functools.partial(
            self._render, request, template="admin/inventory/inventory/adjust_stock.html", title="Adjust stock"
        )
        inventory = self._inventory_or_404(product_id)
        form = AdjustStockForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            delta = form.cleaned_data["delta"]
            try:
                inventory = services.stock_adjust(
                    product_id=inventory.pk, delta=delta, note=form.cleaned_data["note"], actor=request.user
                )
            except StockWouldGoNegative:
                inventory = self._inventory_or_404(product_id)
                messages.error(
                    request,
                    f"Refused: {inventory.available_stock} units are available, so a change of {delta:+d} would push "
                    "available stock below zero. Nothing was changed.",
                )
                return render(inventory=inventory, form=form, status=409)
            except ProductNotFound:
                raise Http404(f"No inventory for product {product_id}.") from None
            messages.success(
                request,
                f"Adjusted {inventory.product.sku} by {delta:+d}: {inventory.available_stock} available, "
                f"{inventory.reserved_stock} reserved.",
            )
            return redirect("admin:inventory_inventory_change", inventory.pk)
        return render(inventory=inventory, form=form)

    def set_counted_view(self, request, product_id):
        if not can_adjust_stock(request):
            raise PermissionDenied
        render = functools.partial(
            self._render, request, template="admin/inventory/inventory/set_counted.html", title="Set counted stock"
        )
        inventory = self._inventory_or_404(product_id)
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
            inventory = self._inventory_or_404(product_id)
            messages.error(
                request,
                f"{STALE_MESSAGE}: the form was loaded at version {version}, the stock is now at version "
                f"{inventory.version} ({inventory.available_stock} available, {inventory.reserved_stock} reserved). "
                "Nothing was saved. Check the current figures and enter your count again.",
            )
            # A fresh form with the current version: the count has to be typed again against current figures.
            fresh = SetCountedStockForm(initial={"version": inventory.version, "note": form.cleaned_data["note"]})
            return render(inventory=inventory, form=fresh, status=409)
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


class ReasonFilter(admin.SimpleListFilter):
    title = "kind"
    parameter_name = "kind"

    def lookups(self, request, model_admin):
        return [("manual", "Manual (adjustment, count)"), ("orders", "Orders (reserve, consume, expire, cancel)")]

    def queryset(self, request, queryset):
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

    def lookup_allowed(self, lookup, value, request=None):
        # Links from the stock and order pages filter the ledger by product or by order.
        if lookup in ("product__id__exact", "order_id__exact", "order_id"):
            return True
        return super().lookup_allowed(lookup, value, request)
