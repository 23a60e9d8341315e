"""The README's queue example, verbatim but for the port, against a live server: join, poll, check out (refused
before the admission, bought after it)."""

import re
import subprocess
from pathlib import Path

import pytest
from django.core.management import call_command

from inventory.models import Product
from waitingroom.testing import admit_now, queue_product

ROOT = Path(__file__).resolve().parents[2]


def readme_queue_block() -> str:
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    return next(block for block in blocks if "/v1/products/101/queue" in block)


def run(block: str, base: str) -> str:
    script = block.replace("localhost:8000", base.removeprefix("http://"))
    result = subprocess.run(  # noqa: S603
        ["bash", "-euo", "pipefail", "-c", script],  # noqa: S607
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.django_db(transaction=True)
def test_the_readme_queue_flow_runs_verbatim(live_server):
    call_command("load_demo_data", verbosity=0)
    product = Product.objects.get(pk=101)
    queue_product(product, pace=50, starts_in=-1)
    block = readme_queue_block()

    first = run(block, live_server.url)
    assert first.count('"state":"waiting"') + first.count('"state": "waiting"') == 2, first
    assert "admission_required" in first

    admit_now(product)
    second = run(block, live_server.url)
    assert re.search(r'"state":\s*"admitted"', second), second
    assert re.search(r'"status":\s*"pending_payment"', second), second
