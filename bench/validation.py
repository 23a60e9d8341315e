"""Hand-written request validation vs DRF serializers with strict integer fields, Python CPU per call.

    .venv/bin/python -m bench.validation

Issue 13 asked whether DRF serializers would cost measurable CPU on checkout. Both implementations parse the
same valid one-line checkout body and the same webhook body; timing is ``bench.cpu.measure_callables``
(process CPU, interleaved rounds, median). The result is recorded in docs/benchmarks.md.
"""

import os
import sys
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "skincare.settings")


def serializers() -> tuple[type, type]:
    from rest_framework import serializers as s

    from skincare.validation import is_int

    class StrictIntegerField(s.IntegerField):
        """JSON integers only: no booleans, floats or numeric strings."""

        def to_internal_value(self, data: Any) -> int:
            if not is_int(data):
                self.fail("invalid")
            return super().to_internal_value(data)

    class CheckoutItem(s.Serializer):
        product_id = StrictIntegerField(min_value=1, max_value=2**63 - 1)
        qty = StrictIntegerField(min_value=1)

    class Checkout(s.Serializer):
        items = CheckoutItem(many=True, allow_empty=False, max_length=20)

    class Webhook(s.Serializer):
        event_id = s.CharField(max_length=200)
        type = s.ChoiceField(choices=["payment.succeeded", "payment.failed"])
        order_id = StrictIntegerField(min_value=1, max_value=2**63 - 1)
        amount = s.DecimalField(max_digits=12, decimal_places=2, min_value=0)
        provider_reference = s.CharField(max_length=200, required=False, allow_blank=True)

    return Checkout, Webhook


def main() -> int:
    from bench import cpu

    cpu.setup_django()
    from payments.api import parse_webhook
    from skincare import validation

    checkout_serializer, webhook_serializer = serializers()
    checkout_body = {"items": [{"product_id": 101, "qty": 1}]}
    webhook_body = {
        "event_id": "evt-1",
        "type": "payment.succeeded",
        "order_id": 42,
        "amount": "12.50",
        "currency": "IDR",
        "provider_reference": "ref-1",
    }

    def drf_checkout() -> Any:
        serializer = checkout_serializer(data=checkout_body)
        assert serializer.is_valid(), serializer.errors
        return serializer.validated_data

    def drf_webhook() -> Any:
        serializer = webhook_serializer(data=webhook_body)
        assert serializer.is_valid(), serializer.errors
        return serializer.validated_data

    results = cpu.measure_callables(
        {
            "checkout: hand-written": lambda: validation.checkout_items(checkout_body, max_items=20),
            "checkout: DRF serializer": drf_checkout,
            "webhook: hand-written": lambda: parse_webhook(webhook_body),
            "webhook: DRF serializer": drf_webhook,
        },
        rounds=7,
        requests=2000,
        warmup=200,
    )
    print(cpu.markdown_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
