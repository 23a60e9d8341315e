from django.db.models import QuerySet

from inventory.models import Product


def product_list() -> QuerySet[Product]:
    """Active products with their stock counters, in id order (one query)."""
    return Product.objects.filter(is_active=True).select_related("inventory").order_by("pk")


def product_get(*, product_id: int) -> Product | None:
    return product_list().filter(pk=product_id).first()
