"""The payments tests' Midtrans: the local fake of its API (``devtools/fake_midtrans.py``), and the shop pointed at it
with a short deadline (0.5 s) and the default safety margin."""

import pytest

from devtools.fake_midtrans import FakeMidtrans
from skincare.demo import TEST_MIDTRANS_SERVER_KEY

TIMEOUT = 0.5  # seconds: the shop's bound on every call to the fake


@pytest.fixture
def fake(settings):
    with FakeMidtrans() as server:
        settings.PAYMENT_GATEWAY = "midtrans"
        settings.MIDTRANS_SERVER_KEY = TEST_MIDTRANS_SERVER_KEY
        settings.MIDTRANS_SNAP_BASE_URL = server.base_url
        settings.MIDTRANS_API_BASE_URL = server.base_url
        settings.MIDTRANS_TIMEOUT_SECONDS = TIMEOUT
        settings.MIDTRANS_EXPIRY_MARGIN_SECONDS = 180
        yield server
