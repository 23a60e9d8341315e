"""The queues in the admin: each product's passes by state (waiting, admitted, used, expired), its pace, pause/resume.

Permissions follow the product page: stock managers (``inventory.change_product``) add, change, pause, resume and
remove queues; ops viewers (``inventory.view_product``) see them. Every change goes through ``waitingroom.services``.
"""

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from skincare.errors import InvalidInput
from waitingroom import selectors, services
from waitingroom.models import ProductQueue


class ProductQueueForm(forms.ModelForm):
    class Meta:
        model = ProductQueue
        fields = ["product", "admit_per_second", "paused"]

    def clean_admit_per_second(self) -> int:
        """The pace's bounds (``waitingroom.services.queue_pace_check``) as the form's own error, before any save."""
        pace = self.cleaned_data["admit_per_second"]
        try:
            services.queue_pace_check(admit_per_second=pace)
        except InvalidInput as exc:
            raise forms.ValidationError(exc.message) from None
        return pace


@admin.register(ProductQueue)
class ProductQueueAdmin(admin.ModelAdmin):
    form = ProductQueueForm
    list_display = [
        "product",
        "admit_per_second",
        "paused",
        "waiting",
        "admitted",
        "used",
        "expired",
        "admitted_through",
    ]
    list_filter = ["paused"]
    fields = ["product", "admit_per_second", "paused", "admitted_through", "positioned_through", "credited_at"]
    readonly_fields = ["admitted_through", "positioned_through", "credited_at"]
    actions = ["pause", "resume"]

    def get_readonly_fields(self, request, obj=None):
        return [*self.readonly_fields, "product"] if obj is not None else self.readonly_fields

    def _state(self, obj: ProductQueue) -> selectors.QueueState | None:
        states = selectors.queue_states(product_ids=[obj.pk])
        return states[0] if states else None

    @admin.display(description="waiting")
    def waiting(self, obj: ProductQueue) -> int | None:
        state = self._state(obj)
        return None if state is None else state.waiting

    @admin.display(description="admitted (outstanding)")
    def admitted(self, obj: ProductQueue) -> int | None:
        state = self._state(obj)
        return None if state is None else state.admitted

    @admin.display(description="used")
    def used(self, obj: ProductQueue) -> int | None:
        state = self._state(obj)
        return None if state is None else state.used

    @admin.display(description="expired")
    def expired(self, obj: ProductQueue) -> int | None:
        state = self._state(obj)
        return None if state is None else state.expired

    def save_model(self, request, obj, form, change):
        services.queue_set(product_id=obj.product_id, admit_per_second=obj.admit_per_second)
        if not change or "paused" in form.changed_data:
            services.queue_pause(product_id=obj.product_id, paused=obj.paused)

    def delete_model(self, request, obj):
        services.queue_remove(product_id=obj.product_id)

    def delete_queryset(self, request, queryset):
        for queue in queryset:
            services.queue_remove(product_id=queue.product_id)

    @admin.action(description="Pause admission", permissions=["change"])
    def pause(self, request: HttpRequest, queryset: QuerySet[ProductQueue]) -> None:
        for queue in queryset:
            services.queue_pause(product_id=queue.product_id, paused=True)
        self.message_user(request, f"Paused {queryset.count()} queue(s).", messages.SUCCESS)

    @admin.action(description="Resume admission", permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[ProductQueue]) -> None:
        for queue in queryset:
            services.queue_pause(product_id=queue.product_id, paused=False)
        self.message_user(request, f"Resumed {queryset.count()} queue(s).", messages.SUCCESS)

    # The product page's permissions decide.
    def has_view_permission(self, request, obj=None):
        return request.user.has_perm("inventory.view_product") or request.user.has_perm("inventory.change_product")

    def has_add_permission(self, request):
        return request.user.has_perm("inventory.change_product")

    def has_change_permission(self, request, obj=None):
        return request.user.has_perm("inventory.change_product")

    def has_delete_permission(self, request, obj=None):
        return request.user.has_perm("inventory.change_product")

    def has_module_permission(self, request):
        return self.has_view_permission(request)
