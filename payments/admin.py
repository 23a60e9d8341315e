"""Ops admin for payment attempts and processed gateway events, all read-only, and for unmatched payments (read-only
but for the action that marks them resolved).

The order page shows each order's payment attempts: :class:`OrderPaymentsAdmin`, the order admin with one more
inline, registered in its place (orders never imports payments).
"""

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from orders.admin import OrderAdmin
from orders.models import Order
from payments import services, sessions
from payments.models import NEEDS_OPS, PaymentAttempt, ProcessedEvent, UnmatchedPayment
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
    """The order admin with each order's payment attempts; its Cancel action closes each cancelled order's gateway
    transaction too, like a customer's cancel."""

    inlines = [*OrderAdmin.inlines, PaymentAttemptInline]

    def cancel_order(self, *, order_id: int) -> None:
        super().cancel_order(order_id=order_id)
        sessions.session_close_after_cancel(order_id=order_id)  # committed: now the gateway, outside any transaction


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


@admin.register(UnmatchedPayment)
class UnmatchedPaymentAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Money a gateway took for a transaction this shop did not issue: refund it at the gateway (or settle it with
    the buyer), then mark it resolved here; until then the sale board and ``reconcile_payments`` count it."""

    list_display = [
        "id",
        "gateway",
        "gateway_order_id",
        "transaction_id",
        "amount",
        "currency",
        "gateway_status",
        "received_at",
        "resolved_at",
        "resolved_by",
    ]
    list_filter = [("resolved_at", admin.EmptyFieldListFilter), "gateway"]
    search_fields = ["=gateway_order_id", "=transaction_id"]
    actions = ["resolve"]
    show_full_result_count = False

    def has_resolve_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("payments.change_unmatchedpayment")

    @admin.action(description="Mark resolved (refunded or settled at the gateway)", permissions=["resolve"])
    def resolve(self, request: HttpRequest, queryset: QuerySet[UnmatchedPayment]) -> None:
        count = services.unmatched_payments_resolve(
            ids=list(queryset.values_list("id", flat=True)), resolved_by=request.user.get_username()
        )
        self.message_user(request, f"Marked {count} unmatched payment(s) resolved.", messages.SUCCESS)
