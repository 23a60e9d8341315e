"""Schemathesis against a live server (gunicorn on the test database), as an external client would try the API: every
operation of ``/v1/schema``, a bounded number of generated requests each (valid and invalid ones), every check, and
the stateful phase (links inferred from the responses: an order created by a checkout is read, cancelled, paid).
The webhook is signed through a hook (devtools/schemathesis_hooks.py); one demo product sells through a queue, so
the waiting room answers too. Any 5xx, any answer outside the document (status, headers, body), any schema-valid
request refused or schema-invalid one accepted fails the build.
"""

import os
import subprocess
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import call_command

from checkout.testing import place as checkout
from devtools.processes import BENCH_SECRET, Gunicorn
from inventory.models import Product
from payments.models import ProcessedEvent
from skincare.demo import DEMO_CUSTOMER, DEMO_CUSTOMER_TOKEN
from skincare.tests.test_metrics import _url as database_url_for_children
from waitingroom.models import QueuePass
from waitingroom.testing import queue_product

# Sequences start at 1, so the first order below is order 1: the smallest id the document allows, which the
# coverage phase sends, so a signed webhook meets a real order.
pytestmark = pytest.mark.django_db(transaction=True, reset_sequences=True)

ROOT = Path(__file__).resolve().parents[2]
# Generated requests per operation and phase: the run stays within about three minutes on two cores.
MAX_EXAMPLES = int(os.environ.get("SCHEMATHESIS_MAX_EXAMPLES", "250"))


def test_schemathesis_finds_nothing_against_a_live_server(tmp_path) -> None:  # type: ignore[no-untyped-def]
    call_command("load_demo_data", verbosity=0)
    queued = Product.objects.order_by("pk").last()
    queue_product(queued, pace=50)
    first = checkout(
        customer=User.objects.get(username=DEMO_CUSTOMER), items=[(Product.objects.order_by("pk")[0].pk, 1)]
    )
    assert first.order_id == 1
    env = {
        "ACCESS_LOG": "false",
        "PAYMENT_WEBHOOK_SECRET": BENCH_SECRET,
        "CHECKOUT_MAX_QTY": str(settings.CHECKOUT_MAX_QTY),
    }
    with Gunicorn(database_url_for_children(), workers=2, conn_max_age=60, extra_env=env) as web:
        started = time.monotonic()
        result = subprocess.run(  # noqa: S603 - the venv's own schemathesis
            [
                str(ROOT / ".venv/bin/schemathesis"),
                f"--config-file={ROOT / 'devtools/schemathesis.toml'}",
                "run",
                f"{web.base}/v1/schema",
                "--checks=all",
                f"--max-examples={MAX_EXAMPLES}",
                "--phases=examples,coverage,fuzzing,stateful",
                "--mode=all",
                f"--header=Authorization: Bearer {DEMO_CUSTOMER_TOKEN}",
                "--request-timeout=20",
                "--workers=1",
                "--seed=1",
                "--no-color",
                f"--report-dir={tmp_path}",
            ],
            cwd=tmp_path,  # its cache directory (.schemathesis) goes there, not into the tree
            env={**os.environ, **env, "PYTHONPATH": str(ROOT), "SCHEMATHESIS_HOOKS": "devtools.schemathesis_hooks"},
            capture_output=True,
            text=True,
            timeout=600,
        )
        elapsed = time.monotonic() - started
    (tmp_path / "schemathesis.txt").write_text(result.stdout + result.stderr)
    print(result.stdout[-6000:], f"\n{elapsed:.0f} s")  # shown with -s and on failure
    assert result.returncode == 0, result.stdout[-12000:] + result.stderr[-3000:]
    # The run reached the waiting room (a pass for the queued product) and the webhook's outcomes (a signed event
    # recorded), not only their refusals.
    assert QueuePass.objects.filter(product=queued).exists()
    assert ProcessedEvent.objects.exists()
