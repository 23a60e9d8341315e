"""The payment chaos proof (``devtools/payment_chaos.py``) at a size that fits the suite: 30 buyers through the
Midtrans fake while it injects latency, time-outs, 5xx, a stall, duplicate, out-of-order, late, lost and foreign
notifications, with one restart of the web tier; every order must end paid exactly once or cancelled, every other
charge flagged for refund, foreign money unmatched, audit_inventory and reconcile_payments clean."""

import os

import pytest
from django.core.management import call_command

from devtools import payment_chaos
from skincare.tests.test_metrics import _url as database_url_for_children


@pytest.mark.django_db(transaction=True)
def test_every_order_ends_paid_once_or_cancelled_while_the_gateway_misbehaves(capsys):
    call_command("load_demo_data")  # the flash product the proof sells
    environment = dict(os.environ)

    code = payment_chaos.main(
        [
            "--orders",
            "30",
            "--concurrency",
            "8",
            "--workers",
            "2",
            "--stall",
            "2",
            "--database-url",
            database_url_for_children(),
        ]
    )

    printed = capsys.readouterr().out
    assert code == 0, printed
    # Its gateway settings went to its own processes only: a server a later test starts is not sent to its fake.
    assert dict(os.environ) == environment
    assert "make payment-chaos: passed" in printed
    for kind in (
        "notification_duplicate",
        "notification_late",
        "notification_lost",
        "notification_foreign",
        "gateway_5xx",
        "gateway_stall",
    ):
        assert f"'{kind}': " in printed, (kind, printed)  # every kind of fault was injected at least once
