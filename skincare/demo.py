"""Every published (demo, test, benchmark) value in one place.

DEMO ONLY: these values are in a public repository, so they protect nothing. Development reads the demo ones from
the git-ignored ``.env`` that ``make run`` writes (``devtools/devenv.py``); with ``DJANGO_ENV=production`` every
start-up refuses all of them (``skincare.checks`` and ``payments.checks``, tag ``production``). A value used
anywhere in the repository as a secret must be listed in ``PUBLISHED_SECRETS``
(``skincare/tests/test_production_refuses_demo.py`` greps the repository for them).

Plain constants only: ``config.settings`` imports this module before Django is set up.
"""

# The demo shop (`make run`): the .env values and the demo accounts of `manage.py load_demo_data`.
DEMO_SECRET_KEY = "demo-only-insecure-secret-key-not-for-production"  # noqa: S105 - published demo value
DEMO_WEBHOOK_SECRET = "demo-webhook-secret-not-for-production"  # noqa: S105 - published demo value
DEMO_CUSTOMER = "demo-customer"
DEMO_CUSTOMER_TOKEN = "test-customer-token"  # noqa: S105 - published demo value
DEMO_OPS_USER = "demo-ops"
DEMO_OPS_PASSWORD = "demo-ops-password"  # noqa: S105 - published demo value
DEMO_USERS = (DEMO_CUSTOMER, DEMO_OPS_USER)

# What `make run` and `make db` write to .env when it does not exist (labelled; an exported variable wins).
# No DJANGO_ENV: only the process environment selects the mode (config/modes.py).
DEV_ENV = {
    "DJANGO_SECRET_KEY": DEMO_SECRET_KEY,
    "PAYMENT_WEBHOOK_SECRET": DEMO_WEBHOOK_SECRET,
    # The sandbox pays orders without money; without DEBUG it needs the explicit demo opt-in (payments.E002).
    "PAYMENT_SANDBOX": "true",
    "PAYMENT_SANDBOX_ALLOW_WITHOUT_DEBUG": "true",
}

# Test and benchmark values (devtools/testenv.py, devtools/processes.py, bench/, the tests, the Dockerfile's
# build step, the settings' DEBUG-only fallback).
TEST_SECRET_KEY = "test-only-insecure-secret-key-never-use-in-production"  # noqa: S105
TEST_WEBHOOK_SECRET = "test-only-webhook-secret-never-use-in-production"  # noqa: S105
BENCH_SECRET_KEY = "bench-only-django-secret-key-not-for-production"  # noqa: S105
BENCH_WEBHOOK_SECRET = "bench-webhook-secret-not-for-production"  # noqa: S105
DEBUG_FALLBACK_SECRET_KEY = "dev-only-insecure-key-set-DJANGO_SECRET_KEY-in-production"  # noqa: S105
BUILD_SECRET_KEY = "build-only-not-a-secret"  # noqa: S105 - the Dockerfile's collectstatic step
# The Midtrans server key of the tests and of the fake Midtrans server (devtools/fake_midtrans.py).
TEST_MIDTRANS_SERVER_KEY = "SB-Mid-server-test-only-never-use-in-production"
# The Xendit secret key and callback verification token of the tests and of the fake Xendit server
# (devtools/fake_xendit.py).
TEST_XENDIT_SECRET_KEY = "xnd_development_test_only_never_use_in_production"  # noqa: S105
TEST_XENDIT_CALLBACK_TOKEN = "xendit-callback-token-test-only-never-use-in-production"  # noqa: S105

PUBLISHED_SECRETS = frozenset(
    {
        DEMO_SECRET_KEY,
        DEMO_WEBHOOK_SECRET,
        DEMO_CUSTOMER_TOKEN,
        DEMO_OPS_PASSWORD,
        TEST_SECRET_KEY,
        TEST_WEBHOOK_SECRET,
        BENCH_SECRET_KEY,
        BENCH_WEBHOOK_SECRET,
        DEBUG_FALLBACK_SECRET_KEY,
        BUILD_SECRET_KEY,
        TEST_MIDTRANS_SERVER_KEY,
        TEST_XENDIT_SECRET_KEY,
        TEST_XENDIT_CALLBACK_TOKEN,
        # fixed webhook secrets of the test modules
        "whsec-fuzz-secret",
        "whsec-metrics-test",
        "whsec-test-lifecycle-secret",
        "whsec-outage-secret",
        "whsec-sandbox-test",
        "not-the-secret",
        "previous-secret",
        "from-the-environment",
        "set",
        # the test suite's /metrics token
        "scrape-token-for-tests",
    }
)


def is_published(value: str) -> bool:
    """True when ``value`` is one of the repository's published values (compared as given, and stripped)."""
    return value in PUBLISHED_SECRETS or value.strip() in PUBLISHED_SECRETS
