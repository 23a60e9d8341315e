"""Ops forms for stock changes in the admin. They only collect and validate input: every write goes through
``inventory.services`` (``stock_adjust`` and ``stock_set_counted``), never through a model form."""

from django import forms

MAX_UNITS = 1_000_000


def reason_field():
    return forms.CharField(
        label="Reason",
        max_length=500,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
        help_text="Required. Stored in the stock ledger with your user name.",
    )


class AdjustStockForm(forms.Form):
    """A relative change: ``available_stock = available_stock + delta`` in one F-expression UPDATE. Safe while
    customers check out, because it never writes back a figure read earlier."""

    delta = forms.IntegerField(
        label="Change in available units",
        min_value=-MAX_UNITS,
        max_value=MAX_UNITS,
        help_text="Signed, not zero: +12 for a delivery found in the back room, -3 for damaged units.",
    )
    note = reason_field()

    def clean_delta(self):
        delta = self.cleaned_data["delta"]
        if delta == 0:
            raise forms.ValidationError("Enter a change other than zero.", code="zero_delta")
        return delta


class SetCountedStockForm(forms.Form):
    """An absolute figure from a stock count. It carries the inventory ``version`` it was loaded with; the
    service refuses the save when the row has changed since (a checkout, a payment, another adjustment), so a
    count typed against stale figures can never overwrite a concurrent reservation."""

    counted = forms.IntegerField(
        label="Counted available units",
        min_value=0,
        max_value=MAX_UNITS,
        help_text="Units free to sell after the count, not including the units reserved by pending orders.",
    )
    note = reason_field()
    version = forms.IntegerField(widget=forms.HiddenInput, min_value=1)
