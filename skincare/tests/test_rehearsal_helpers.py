"""The rehearsals' shared helpers (``devtools.processes``, used by ``make scaleout`` and ``make failover``): the
signed webhook they send and polling with a deadline."""

import json

from devtools import processes
from payments import signing


def test_the_rehearsals_webhook_pays_the_order_in_full_and_is_signed_with_the_bench_secret():
    order = {"order_id": 42, "total": "19.90", "currency": "IDR", "status": "pending_payment"}

    body, headers = processes.payment_webhook(order, event_id="evt-scaleout-42", reference="psp-42")

    assert json.loads(body) == {
        "event_id": "evt-scaleout-42",
        "type": "payment.succeeded",
        "order_id": 42,
        "amount": "19.90",
        "currency": "IDR",  # the order's own
        "provider_reference": "psp-42",
    }
    signing.verify(header=headers["X-Signature"], body=body, secret=processes.BENCH_SECRET, tolerance_seconds=300)


def test_wait_for_returns_the_seconds_it_waited_or_none_at_the_deadline():
    answers = iter([RuntimeError("still starting"), False, True])

    def ready():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert processes.wait_for(ready, 30) is not None  # an error counts as "not yet"
    assert processes.wait_for(lambda: False, 0.3) is None
