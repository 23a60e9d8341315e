"""The product page's optimistic version check: a stale product page must not write back an old sale
window or price over a newer one (a sale that ops just ended would resume), as the stock forms refuse a stale count.

The form carries, hidden, a digest of the product's editable fields as they were when the page was loaded. Saving
locks the product row (``FOR NO KEY UPDATE``: lock order step 7 in docs/locking.md, as ``stock_buckets_set`` takes it) and refuses when the row's current fields no longer
match that digest, however they were changed (another admin page, ``flash_sale_setup``, a service's UPDATE)."""

import hashlib
import json
from typing import Any

from django import forms

from inventory.catalogue import price_problem, sentence
from inventory.models import Product

# Every field the product page edits.
VERSIONED_FIELDS = (
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
)
STALE_PRODUCT_MESSAGE = (
    "This product was changed after you loaded this page (by someone else, or by a command): nothing was saved. "
    "Reload the page to see its current values, then make your change again."
)


def version_of(values: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps([str(values[f]) for f in VERSIONED_FIELDS]).encode()).hexdigest()[:32]


def product_version(product_id: int, *, lock: bool = False) -> str | None:
    """The current version of the product's editable fields (None: no such product)."""
    rows = Product.objects.filter(pk=product_id)
    if lock:
        rows = rows.select_for_update(no_key=True)
    values = rows.values(*VERSIONED_FIELDS).first()
    return None if values is None else version_of(values)


class ProductVersionForm(forms.ModelForm):
    loaded_version = forms.CharField(widget=forms.HiddenInput, required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.fields["loaded_version"].initial = version_of({f: getattr(self.instance, f) for f in VERSIONED_FIELDS})

    def clean_price(self) -> Any:
        return self._chargeable("price")

    def clean_sale_price(self) -> Any:
        return self._chargeable("sale_price")

    def _chargeable(self, field: str) -> Any:
        """The catalogue's rule on prices (``inventory.catalogue.price_problem``): the gateway's, by name."""
        value = self.cleaned_data.get(field)
        if problem := price_problem(field=field, value=value):
            raise forms.ValidationError(sentence(problem))
        return value

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean()
        if self.instance.pk is not None:
            current = product_version(self.instance.pk, lock=True)  # the admin's change view is one transaction
            if not cleaned.get("loaded_version") or cleaned["loaded_version"] != current:
                raise forms.ValidationError(STALE_PRODUCT_MESSAGE, code="stale")
        return cleaned
