"""The payments tests' gateways: the local fakes of Midtrans's and Xendit's APIs (``devtools/fake_midtrans.py``,
``devtools/fake_xendit.py``, the latter without its rate limit unless a test sets one), and the shop pointed at one
with a short deadline (0.5 s) and the default safety margin."""

import pytest

from devtools.fake_midtrans import FakeMidtrans
from devtools.fake_xendit import FakeXendit
from payments import boundary
from skincare.demo import TEST_MIDTRANS_SERVER_KEY, TEST_XENDIT_CALLBACK_TOKEN, TEST_XENDIT_SECRET_KEY

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


@pytest.fixture
def xendit(settings):
    with FakeXendit(limit_per_second=None) as server:
        settings.PAYMENT_GATEWAY = "xendit"
        settings.XENDIT_SECRET_KEY = TEST_XENDIT_SECRET_KEY
        settings.XENDIT_CALLBACK_TOKEN = TEST_XENDIT_CALLBACK_TOKEN
        settings.XENDIT_API_BASE_URL = server.base_url
        settings.XENDIT_TIMEOUT_SECONDS = TIMEOUT
        settings.XENDIT_EXPIRY_MARGIN_SECONDS = 180
        boundary.forget()
        yield server
        server.release.set()
    boundary.forget()
