"""Ops admin for payment attempts and processed gateway events, all read-only.

The order page shows each order's payment attempts: :class:`OrderPaymentsAdmin`, the order admin with one more
inline, registered in its place (orders never imports payments).
"""

from django.contrib import admin

from orders.admin import OrderAdmin
from orders.models import Order
from payments.models import NEEDS_OPS, PaymentAttempt, ProcessedEvent
from skincare.admin_helpers import ReadOnlyAdminMixin, ReadOnlyInline


class PaymentAttemptInline(ReadOnlyInline):
    model = PaymentAttempt
    fields = [
        "status",
        "amount",
        "received_amount",
        "received_currency",
        "provider_reference",
        "created_at",
        "updated_at",
    ]


admin.site.unregister(Order)


@admin.register(Order)
class OrderPaymentsAdmin(OrderAdmin):
    """The order admin with each order's payment attempts."""

    inlines = [*OrderAdmin.inlines, PaymentAttemptInline]


class NeedsOpsFilter(admin.SimpleListFilter):
    title = "needs ops"
    parameter_name = "needs_ops"

    def lookups(self, request, model_admin):
        return [("yes", "Refund required, amount or currency mismatch")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(status__in=NEEDS_OPS)
        return queryset


@admin.register(PaymentAttempt)
class PaymentAttemptAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = [
        "id",
        "order",
        "status",
        "amount",
        "received_amount",
        "received_currency",
        "provider_reference",
        "created_at",
    ]
    list_filter = ["status", NeedsOpsFilter, "created_at"]
    list_select_related = ["order"]
    search_fields = ["=order__id", "provider_reference"]
    show_full_result_count = False


@admin.register(ProcessedEvent)
class ProcessedEventAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["event_id", "event_type", "order_id", "outcome", "processed_at"]
    list_filter = ["event_type", "outcome"]
    search_fields = ["=event_id", "=order_id"]
    show_full_result_count = False
