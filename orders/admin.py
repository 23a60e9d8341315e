"""Ops admin for orders and reservations. Everything is read-only; the one write is the *Cancel order* action,
which calls ``orders.services.order_cancel`` (reason ``ops_cancelled``) for each selected order.

The stock counters' admin gets a filter on active reservations here: :class:`InventoryReservationsAdmin`, the
inventory admin with one more filter, registered in its place (inventory never imports orders). The sale board's
"Sale board" button on the order list comes from the back office's template (``backoffice/templates``).
"""

from django.contrib import admin, messages
from django.db.models import Exists, OuterRef
from django.urls import reverse
from django.utils.html import format_html

from inventory.admin import InventoryAdmin, ledger_table
from inventory.models import Inventory, StockMovement
from orders import services
from orders.exceptions import OrderNotFound, OrderNotPending
from orders.models import Order, OrderLine, Reservation
from skincare.admin_helpers import ReadOnlyAdminMixin, ReadOnlyInline
from skincare.errors import ServiceBusy


class OrderLineInline(ReadOnlyInline):
    model = OrderLine
    fields = ["product", "qty", "unit_price"]


class ReservationInline(ReadOnlyInline):
    model = Reservation
    fields = ["product", "qty", "status", "expires_at", "updated_at"]


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ["id", "customer", "status", "total", "payment_expires_at", "cancel_reason", "created_at"]
    list_filter = ["status", "cancel_reason", "created_at"]
    list_select_related = ["customer"]
    search_fields = ["=id", "customer__username"]
    show_full_result_count = False
    inlines = [OrderLineInline, ReservationInline]
    fields = [
        "customer",
        "status",
        "total",
        "payment_expires_at",
        "cancel_reason",
        "created_at",
        "updated_at",
        "ledger_rows",
    ]
    readonly_fields = fields
    actions = ["cancel_orders"]

    def has_add_permission(self, request):
        return False  # orders are created by checkout only

    def has_delete_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        # Without an object Django asks whether the changelist actions may run (Cancel order needs
        # orders.change_order). An order itself is never saved from a form: a stale form would write back
        # the status and total it was loaded with, so the change page is view-only for everyone.
        if obj is not None:
            return False
        return super().has_change_permission(request)

    @admin.display(description="Stock ledger rows of this order")
    def ledger_rows(self, order):
        movements = StockMovement.objects.filter(order_id=order.pk).select_related("product", "actor").order_by("id")
        link = reverse("admin:inventory_stockmovement_changelist") + f"?order_id__exact={order.pk}"
        return format_html(
            '{}<p><a href="{}">Open in the ledger</a></p>',
            ledger_table(movements, show_product=True, show_order=False),
            link,
        )

    def cancel_order(self, *, order_id: int) -> None:
        """One order of the Cancel action (``ops_cancelled``); the payments app's admin also closes its gateway
        transaction once the cancel has committed."""
        services.order_cancel(order_id=order_id, reason=Order.CancelReason.OPS_CANCELLED)

    @admin.action(description="Cancel selected orders (return their stock)", permissions=["change"])
    def cancel_orders(self, request, queryset):
        cancelled, not_pending, failed = [], [], []
        for order_id in queryset.order_by("id").values_list("id", flat=True):
            try:
                self.cancel_order(order_id=order_id)
            except OrderNotPending as exc:
                not_pending.append(f"#{order_id} ({exc.status})")
            except (OrderNotFound, ServiceBusy) as exc:
                failed.append(f"#{order_id} ({exc.message})")
            else:
                cancelled.append(f"#{order_id}")
        if cancelled:
            self.message_user(
                request,
                f"Cancelled {len(cancelled)} order(s), stock returned: {', '.join(cancelled)}.",
                messages.SUCCESS,
            )
        else:
            self.message_user(request, "Cancelled 0 orders.", messages.WARNING)
        if not_pending:
            self.message_user(
                request,
                f"Not cancelled, no longer pending payment: {', '.join(not_pending)}.",
                messages.WARNING,
            )
        if failed:
            self.message_user(request, f"Not cancelled, try again: {', '.join(failed)}.", messages.ERROR)


@admin.register(Reservation)
class ReservationAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["id", "order", "product", "qty", "status", "expires_at", "updated_at"]
    list_filter = ["status", "expires_at"]
    list_select_related = ["order", "product"]
    search_fields = ["=order__id", "product__sku"]
    show_full_result_count = False


class ActiveReservationsFilter(admin.SimpleListFilter):
    title = "active reservations"
    parameter_name = "has_active_reservations"

    def lookups(self, request, model_admin):
        return [("yes", "Has active reservations"), ("no", "No active reservations")]

    def queryset(self, request, queryset):
        active = Exists(Reservation.objects.filter(product_id=OuterRef("product_id"), status=Reservation.Status.ACTIVE))
        if self.value() == "yes":
            return queryset.filter(active)
        if self.value() == "no":
            return queryset.filter(~active)
        return queryset


admin.site.unregister(Inventory)


@admin.register(Inventory)
class InventoryReservationsAdmin(InventoryAdmin):
    """The stock counters' admin with a filter on the product's active reservations."""

    list_filter = [*InventoryAdmin.list_filter, ActiveReservationsFilter]
