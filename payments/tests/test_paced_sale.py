"""The paced Xendit sale (``devtools/paced_sale.py``) at a size that fits the suite: 40 buyers admitted by a queue at
8 a second open their payment page at once on two gunicorn processes paced at 8 pages a second, against the Xendit
fake at its published limit (10 a second). Every page opens before its deadline less the margin, no buyer sees a
429, every order is paid, audit_inventory and reconcile_payments are clean, and the fake was asked for no more than
10 invoices in any second (its own count of accepted ones cannot exceed 10: it refuses the 11th, so the test also
holds that it refused no create).

The control runs the same sale not paced (``--rate 0``) with a queue fast enough to admit all 40 buyers at its first
advance (50 a second): their pages are all asked for at once, so the fake must refuse creates (429), which the shop
answers as ``503 gateway_unavailable``, never as a 429. (At the shop's default pace of 10 a second the buyers arrive
spread out enough that the fake sometimes refuses nothing: that is no control.)"""

import os

import pytest
from django.core.management import call_command

from devtools import paced_sale
from skincare.tests.test_metrics import _url as database_url_for_children


def rehearse(*options: str) -> tuple[int, dict, str]:
    call_command("load_demo_data")  # the flash product the sale sells
    environment = dict(os.environ)
    code, report = paced_sale.rehearse(["--units", "40", "--database-url", database_url_for_children(), *options])
    # Its gateway settings went to its own processes only: a server a later test starts is not sent to its fake.
    assert dict(os.environ) == environment
    return code, report, "\n".join(report["failures"])


@pytest.mark.django_db(transaction=True)
def test_paced_pages_keep_every_process_within_xendits_limit_and_every_buyer_pays_in_time(capsys):
    code, report, failures = rehearse()

    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "make paced-sale: passed" in printed
    assert report["buyers_saw_429"] == 0, report
    assert report["orders"] == 40 and report["pages_before_deadline"] == 40, report
    assert report["least_seconds_left"] > 0, report
    assert report["paid"] == 40, report
    assert report["audit_clean"] and report["reconcile_clean"], failures
    assert report["server_errors"] == {}, report
    assert report["max_sessions_in_any_second"] <= 10, report
    assert report["max_creates_asked_in_any_second"] <= 10, report
    assert report["fake_429_by_endpoint"].get("create", 0) == 0, report
    assert report["payment_pages_paced"] > 0, report  # the pace held visits back: it was at work


@pytest.mark.django_db(transaction=True)
def test_control_unpaced_pages_are_refused_by_xendit_and_buyers_still_see_no_429(capsys):
    code, report, failures = rehearse("--rate", "0", "--admit-per-second", "50")

    printed = capsys.readouterr().out
    assert report["fake_answered_429"] > 0, printed
    assert report["fake_429_by_endpoint"].get("create", 0) > 0, report
    assert report["max_creates_asked_in_any_second"] > 10, report
    assert report["gateway_unavailable"] > 0, report  # each refusal reached the buyer as a 503 with the wait
    assert report["buyers_saw_429"] == 0, report
    assert report["payment_pages_paced"] == 0, report  # not paced
    # Not paced, the run's own checks still hold: the buyers retried and paid.
    assert code == 0, failures
