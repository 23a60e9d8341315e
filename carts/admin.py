from django.contrib import admin

from carts.models import Cart, CartItem
from skincare.admin_helpers import ReadOnlyAdminMixin


class CartItemInline(admin.TabularInline):
    model = CartItem
    extra = 0
    readonly_fields = ["product", "qty"]
    can_delete = False


@admin.register(Cart)
class CartAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Read-only, delete included (no bulk delete either): carts are changed by their customers through the API, and
    pruned by prune_retention."""

    list_display = ["id", "customer", "status", "expires_at", "order", "updated_at"]
    list_filter = ["status"]
    readonly_fields = ["id", "customer", "status", "expires_at", "order", "created_at", "updated_at"]
    inlines = [CartItemInline]
