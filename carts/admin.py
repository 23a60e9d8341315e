from django.contrib import admin

from carts.models import Cart, CartItem


class CartItemInline(admin.TabularInline):
    model = CartItem
    extra = 0
    readonly_fields = ["product", "qty"]
    can_delete = False


@admin.register(Cart)
class CartAdmin(admin.ModelAdmin):
    """Read-only: carts are changed by their customers through the API, and pruned by prune_retention."""

    list_display = ["id", "customer", "status", "expires_at", "order", "updated_at"]
    list_filter = ["status"]
    readonly_fields = ["id", "customer", "status", "expires_at", "order", "created_at", "updated_at"]
    inlines = [CartItemInline]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
