"""The secret key rotates (docs/runbooks/access.md#rotate-the-secret-key): with the previous key in
``DJANGO_SECRET_KEY_FALLBACKS`` everything it signed is still accepted (queue passes, payment links, sandbox links,
known-device cookies, admin sessions) while everything new is signed with the new key; the control, the same
rotation without the fallback, invalidates each of them. Production refuses a published fallback as it refuses a
published key."""

import secrets
import subprocess
import sys
from datetime import UTC, datetime

import pytest
from django.core import signing
from django.http import Http404
from django.test import Client, RequestFactory

from payments import links, sandbox, sessions
from skincare import checks, demo, login_throttle
from skincare.tests.test_production import ROOT, production_env
from waitingroom import passtoken

# Drawn per run: a key written in the repository would be a published one.
OLD_KEY, NEW_KEY = secrets.token_urlsafe(50), secrets.token_urlsafe(50)
ROTATIONS = pytest.mark.parametrize(
    ("fallbacks", "accepted"), [([OLD_KEY], True), ([], False)], ids=["old-key-in-fallbacks", "control-no-fallback"]
)


UNTIL = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)  # a payment deadline, whole seconds as a link holds it


def rotate(settings, fallbacks: list[str]) -> None:  # type: ignore[no-untyped-def]
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = NEW_KEY, fallbacks


@ROTATIONS
def test_a_queue_pass_signed_with_the_previous_key(settings, fallbacks, accepted) -> None:  # type: ignore[no-untyped-def]
    settings.SECRET_KEY = OLD_KEY
    signed = passtoken.SignedPass(pass_id=11, product_id=101, customer_id=7, position=3, queue_created_us=1)
    token = passtoken.pass_sign(signed)
    rotate(settings, fallbacks)
    assert (passtoken._unsign(token) == signed) is accepted
    assert passtoken._unsign(passtoken.pass_sign(signed)) == signed  # a new pass: the new key
    assert passtoken.pass_sign(signed) != token


@ROTATIONS
def test_a_payment_link_signed_with_the_previous_key(settings, fallbacks, accepted) -> None:  # type: ignore[no-untyped-def]
    settings.SECRET_KEY = OLD_KEY
    token = links.link_sign(salt=sessions.LINK_SALT, order_id=41, customer_id=7, until=UNTIL)  # as payment_url signs
    rotate(settings, fallbacks)
    if accepted:
        assert sessions.link_claims(token) == links.Link(41, 7, UNTIL)
    else:
        with pytest.raises(Http404, match="invalid payment link"):
            sessions.link_claims(token)


@ROTATIONS
@pytest.mark.django_db
def test_a_sandbox_link_signed_with_the_previous_key(settings, fallbacks, accepted) -> None:  # type: ignore[no-untyped-def]
    settings.SECRET_KEY = OLD_KEY
    token = sandbox.sandbox_link_token(order_id=2**40, customer_id=7, until=datetime.now(UTC))
    rotate(settings, fallbacks)
    # Accepted: the link's signature holds and the order is looked up (there is none); refused: the signature fails.
    with pytest.raises(Http404, match="no such order" if accepted else "invalid payment link"):
        sandbox._order_from_link(token)


@ROTATIONS
@pytest.mark.django_db
def test_a_known_device_and_an_admin_session_signed_with_the_previous_key(settings, fallbacks, accepted) -> None:  # type: ignore[no-untyped-def]
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_user("ops-lead", password="right-password-for-tests", is_staff=True)
    settings.SECRET_KEY = OLD_KEY
    browser = Client()
    form = {"username": "ops-lead", "password": "right-password-for-tests", "next": "/admin/"}
    assert browser.post("/admin/login/", form).status_code == 302
    assert browser.get("/admin/").status_code == 200
    cookie = browser.cookies[login_throttle.KNOWN_DEVICE_COOKIE].value
    rotate(settings, fallbacks)
    request = RequestFactory().post("/admin/login/")
    request.COOKIES[login_throttle.KNOWN_DEVICE_COOKIE] = cookie
    assert (login_throttle.known_device(request, "ops-lead") is not None) is accepted
    assert browser.get("/admin/").status_code == (200 if accepted else 302)  # still logged in, or sent to log in


PRINT_FALLBACK_ACCEPTS = """
import sys
import django
django.setup()
from django.conf import settings
from django.core import signing
print(len(settings.SECRET_KEY_FALLBACKS), signing.loads(sys.argv[1], salt="rotation-test"))
"""


def test_the_fallbacks_are_read_from_the_environment() -> None:
    token = signing.dumps("signed-with-the-old-key", key=OLD_KEY, salt="rotation-test")
    env = {
        **production_env(DJANGO_ENV="development"),
        "DJANGO_READ_DOT_ENV_FILE": "false",
        "DJANGO_SECRET_KEY": NEW_KEY,
        "DJANGO_SECRET_KEY_FALLBACKS": f"{OLD_KEY},{secrets.token_urlsafe(50)}",
        "DJANGO_SETTINGS_MODULE": "config.settings",
    }
    run = [sys.executable, "-c", PRINT_FALLBACK_ACCEPTS, token]
    result = subprocess.run(run, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)  # noqa: S603
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2", "signed-with-the-old-key"]
    # An empty entry is a mistake, not "no key": refused at start.
    env["DJANGO_SECRET_KEY_FALLBACKS"] = f"{OLD_KEY},,"
    refused = subprocess.run(run, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)  # noqa: S603
    assert refused.returncode != 0 and "DJANGO_SECRET_KEY_FALLBACKS has an empty entry" in refused.stderr


@pytest.mark.parametrize("published", sorted(demo.PUBLISHED_SECRETS))
def test_production_refuses_a_published_fallback_key(settings, published) -> None:  # type: ignore[no-untyped-def]
    settings.PRODUCTION, settings.SECRET_KEY = True, NEW_KEY
    settings.SECRET_KEY_FALLBACKS = [OLD_KEY, f" {published} "]
    assert [m.id for m in checks.production_secret_key()] == ["skincare.E002"]
    # Control: the shop's own earlier key.
    settings.SECRET_KEY_FALLBACKS = [OLD_KEY]
    assert checks.production_secret_key() == []
