"""Tokens stored as digests, expiry and revocation, the checkout rate limit, and start-up refusals."""

import io
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django.core.checks import Error, Warning
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from devtools.testing import run_concurrently
from skincare import checks, services
from skincare.models import ApiToken, api_token_digest

BASE_DIR = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_tokens_are_stored_as_digests_only(make_customer):
    customer = make_customer()

    with connection.cursor() as cursor:
        cursor.execute("SELECT string_agg(t::text, ' ') FROM api_tokens t")
        dump = cursor.fetchone()[0]
        cursor.execute("SELECT to_regclass('authtoken_token')")
        legacy_table = cursor.fetchone()[0]

    assert customer.api_token not in dump
    assert api_token_digest(customer.api_token) in dump
    assert legacy_table is None


@pytest.mark.django_db
def test_auth_is_one_indexed_query(api):
    with CaptureQueriesContext(connection) as queries:
        response = api.get("/v1/orders/999999")

    assert response.status_code == 404
    token_queries = [q["sql"] for q in queries if "api_tokens" in q["sql"]]
    assert len(token_queries) == 1
    assert "WHERE t.digest = " in token_queries[0] and "auth_user" in token_queries[0]


@pytest.mark.django_db
def test_expired_and_revoked_tokens_are_401(make_customer, client, settings):
    settings.API_TOKEN_TTL_SECONDS = 60
    expiring = make_customer()
    revoked = make_customer()
    ApiToken.objects.filter(user=expiring).update(expires_at=None)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE api_tokens SET expires_at = now() - interval '1 second' WHERE user_id = %s", [expiring.pk]
        )
    out = io.StringIO()
    call_command("revoke_token", revoked.username, stdout=out)

    def status(user):
        return client.get("/v1/orders/1", HTTP_AUTHORIZATION=f"Bearer {user.api_token}").status_code

    assert (status(expiring), status(revoked)) == (401, 401)
    assert "revoked 1 token" in out.getvalue()
    fresh = make_customer()
    assert ApiToken.objects.get(user=fresh).expires_at is not None  # API_TOKEN_TTL_SECONDS applied
    assert status(fresh) == 404  # authenticated (no such order)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "header", ["Bearer " + "a" * 201, "Bearer caf\u00e9", "Bearer a b", "Bearer \x7f", "bearer nope"]
)
def test_hostile_authorization_headers_are_401(client, header):
    response = client.get("/v1/orders/1", HTTP_AUTHORIZATION=header)
    assert response.status_code == 401
    assert response.json()["code"] == "unauthorized"


@pytest.mark.django_db
def test_legacy_drf_tokens_are_hashed_and_the_plaintext_table_dropped(make_customer, client):
    from importlib import import_module

    migration = import_module("skincare.migrations.0003_hash_legacy_drf_tokens")
    user = make_customer()
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, created timestamptz NOT NULL, user_id int)"
        )
        cursor.execute("INSERT INTO authtoken_token VALUES ('legacy-plaintext-key', now(), %s)", [user.pk])
        migration.hash_legacy_tokens(cursor)
        cursor.execute("SELECT to_regclass('authtoken_token')")
        assert cursor.fetchone()[0] is None

    assert ApiToken.objects.filter(user=user, digest=api_token_digest("legacy-plaintext-key")).exists()
    assert client.get("/v1/orders/1", HTTP_AUTHORIZATION="Bearer legacy-plaintext-key").status_code == 404


# --------------------------------------------------------------------------------------------------------------
# Rate limit


@pytest.mark.django_db
def test_checkout_rate_limit_is_429_with_retry_after(api, make_product, settings):
    settings.CHECKOUT_RATE_LIMIT = "3/day"
    product = make_product(stock=50)
    body = {"items": [{"product_id": product.pk, "qty": 1}]}

    statuses = [api.post("/v1/checkout", body, format="json").status_code for _ in range(3)]
    limited = api.post("/v1/checkout", body, format="json")

    assert statuses == [201, 201, 201]
    assert limited.status_code == 429
    assert limited.json()["code"] == "rate_limited"
    assert 1 <= int(limited["Retry-After"]) <= 86400


@pytest.mark.django_db
def test_a_rate_limited_customer_can_check_out_again_once_the_window_has_passed(api, make_product, settings):
    settings.CHECKOUT_RATE_LIMIT = "2/day"
    product = make_product(stock=50)
    body = {"items": [{"product_id": product.pk, "qty": 1}]}
    assert [api.post("/v1/checkout", body, format="json").status_code for _ in range(3)] == [201, 201, 429]

    # A day passes for the counter: its stored window now started (and ended) one window ago, by the database clock.
    with connection.cursor() as cursor:
        cursor.execute("UPDATE rate_limit_counters SET window_start = window_start - interval '1 day'")
        assert cursor.rowcount == 1

    again = api.post("/v1/checkout", body, format="json")
    assert again.status_code == 201, again.json()
    with connection.cursor() as cursor:
        cursor.execute("SELECT hits FROM rate_limit_counters")
        assert cursor.fetchone() == (1,)  # a fresh window counts from one


@pytest.mark.django_db(transaction=True)
def test_rate_limit_holds_under_concurrency():
    outcomes = run_concurrently(
        30, lambda i: services.rate_limit_hit(scope="test", subject="c1", limit=5, window_seconds=86400)
    )
    assert [o.error for o in outcomes if o.error] == []
    assert sum(o.value is None for o in outcomes) == 5


@pytest.mark.django_db(transaction=True)
def test_control_read_then_write_counter_lets_too_many_through():
    """The naive counter: read the count, decide, write count + 1. Everyone reads before anyone writes."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO rate_limit_counters (scope, subject, window_start, hits) VALUES ('naive', 'c1', now(), 0)"
        )
    all_read = threading.Barrier(30)

    def naive_hit(i):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT hits FROM rate_limit_counters WHERE scope = 'naive' AND subject = 'c1'")
            hits = cursor.fetchone()[0]
            all_read.wait(timeout=60)
            cursor.execute("UPDATE rate_limit_counters SET hits = %s WHERE scope = 'naive'", [hits + 1])
            return hits < 5

    outcomes = run_concurrently(30, naive_hit)
    assert [o.error for o in outcomes if o.error] == []
    assert sum(o.value for o in outcomes) > 5


def test_rate_setting_is_checked_at_start_up(settings):
    settings.CHECKOUT_RATE_LIMIT = "lots"
    assert [e.id for e in checks.rate_limit_setting()] == ["skincare.E001"]
    settings.CHECKOUT_RATE_LIMIT = "20/minute"
    assert checks.rate_limit_setting() == []


# --------------------------------------------------------------------------------------------------------------
# Start-up refusals: secrets and the time budget


def test_empty_webhook_secret_is_a_start_up_error(settings):
    from payments import checks as payment_checks

    settings.PAYMENT_WEBHOOK_SECRET = ""
    errors = payment_checks.webhook_secret()
    assert [(type(e), e.id) for e in errors] == [(Error, "payments.E001")]
    with pytest.raises(ImproperlyConfigured, match=r"payments\.E001"):
        checks.run_startup_checks()
    settings.PAYMENT_WEBHOOK_SECRET = "set"
    assert payment_checks.webhook_secret() == []


def test_a_midtrans_shop_runs_without_the_generic_webhook_secret_and_that_webhook_refuses_everything(settings, client):
    """Midtrans's notifications carry their own signature (MIDTRANS_SERVER_KEY): the generic webhook's secret is not
    required, and without it that webhook refuses every event, even one signed with the empty key."""
    from payments import checks as payment_checks
    from payments.signing import sign

    settings.PAYMENT_WEBHOOK_SECRET = ""
    settings.PAYMENT_GATEWAY = "midtrans"
    assert payment_checks.webhook_secret() == []
    body = b'{"event_id": "evt-empty-key", "type": "payment.succeeded", "order_id": 1, "amount": "1.00"}'
    answer = client.post(
        "/v1/payments/webhook", body, content_type="application/json", HTTP_X_SIGNATURE=sign(secret="", body=body)
    )
    assert answer.status_code == 401, answer.content
    assert answer.json()["code"] == "invalid_signature"
    settings.PAYMENT_GATEWAY = "sandbox"  # control: the generic webhook is the sandbox shop's payment path
    assert [e.id for e in payment_checks.webhook_secret()] == ["payments.E001"]


def test_timeouts_must_stay_below_the_worker_timeout(settings):
    assert checks.timeout_budget() == []  # the defaults: 5 s lock, 15 s statement, 30 s worker
    settings.DB_STATEMENT_TIMEOUT_MS = 30000
    assert [(type(w), w.id) for w in checks.timeout_budget()] == [(Warning, "skincare.W001")]


def settings_import(env):
    clean = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SECRET_KEY", "DJANGO_DEBUG")}
    return subprocess.run(
        [sys.executable, "-c", "import django.conf as c; print(c.settings.SECRET_KEY[:8])"],
        env={**clean, "DJANGO_SETTINGS_MODULE": "config.settings", **env},
        cwd=BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_no_default_secret_key_outside_development():
    refused = settings_import({})
    debug = settings_import({"DJANGO_DEBUG": "true"})
    explicit = settings_import({"DJANGO_SECRET_KEY": "from-the-environment"})

    assert refused.returncode != 0
    assert "DJANGO_SECRET_KEY is not set" in refused.stderr
    assert (debug.returncode, debug.stdout.strip()) == (0, "dev-only")
    assert (explicit.returncode, explicit.stdout.strip()) == (0, "from-the")
