"""An admin no stranger can lock: failed logins are counted per (address, username), per address,
and per username far above those, and the username's lock never blocks an address that has not failed itself. A
browser that logged in before (a known device) is counted by its own failures only. Ops clear a lock with
``python manage.py admin_login_unlock``, which reads an address exactly as the throttle does."""

import time

import pytest
from django.contrib.auth import get_user_model
from django.core import signing
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client, RequestFactory

from skincare.login_throttle import (
    KNOWN_DEVICE_COOKIE,
    KNOWN_DEVICE_MAX_AGE_SECONDS,
    KNOWN_DEVICE_SALT,
    known_device,
)
from skincare.models import AdminLoginFailure
from skincare.tests.test_client_address import login, someone

PASSWORD = "right-password-for-tests"
ATTACKER, OPERATOR = "203.0.113.66", "198.51.100.7"


@pytest.fixture
def operator(db):  # type: ignore[no-untyped-def]
    return get_user_model().objects.create_user("ops-lead", password=PASSWORD, is_staff=True)


def test_an_attackers_failures_do_not_stop_the_real_operator_logging_in_from_another_address(
    operator, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.ADMIN_LOGIN_MAX_FAILURES = 5
    attacker = Client(REMOTE_ADDR=ATTACKER)
    # The admin's username is no secret: a stranger fails five times for it, and again after each window.
    assert [login(attacker, "ops-lead") for _ in range(5)] == [200] * 5
    assert login(attacker, "ops-lead") == 429
    assert login(attacker, "ops-lead", PASSWORD) == 429  # the attacker's own lock holds even for the right password

    # The real operator, from their own address, logs in during the sale.
    assert login(Client(REMOTE_ADDR=OPERATOR), "ops-lead", PASSWORD) == 302
    # ... even after a typo of their own (one failure: their pair is far below the limit).
    typo = Client(REMOTE_ADDR="198.51.100.8")
    assert login(typo, "ops-lead", "typo") == 200
    assert login(typo, "ops-lead", PASSWORD) == 302
    # Their success forgets their own failures only; the attacker stays locked.
    assert login(attacker, "ops-lead", PASSWORD) == 429
    assert AdminLoginFailure.objects.filter(client_ip=ATTACKER).count() == 5


def test_one_address_guessing_many_usernames_is_locked_as_an_address(operator, settings) -> None:  # type: ignore[no-untyped-def]
    settings.ADMIN_LOGIN_MAX_FAILURES_PER_ADDRESS = 6
    sprayer = Client(REMOTE_ADDR=ATTACKER)
    assert [login(sprayer, someone()) for _ in range(6)] == [200] * 6
    assert login(sprayer, someone()) == 429
    assert login(sprayer, "ops-lead", PASSWORD) == 429
    assert login(Client(REMOTE_ADDR=OPERATOR), "ops-lead", PASSWORD) == 302


def test_the_usernames_own_lock_is_far_higher_and_spares_addresses_that_have_not_failed(operator, settings) -> None:  # type: ignore[no-untyped-def]
    settings.ADMIN_LOGIN_MAX_FAILURES, settings.ADMIN_LOGIN_MAX_FAILURES_PER_USERNAME = 5, 8
    botnet = [Client(REMOTE_ADDR=f"203.0.113.{i}") for i in range(1, 9)]
    assert [login(bot, "ops-lead") for bot in botnet] == [200] * 8  # one guess each, 8 for the account
    # Every address that has failed is now locked out of the account, even below its own pair limit ...
    assert login(botnet[0], "ops-lead", PASSWORD) == 429
    # ... and a fresh address gets one try, so the right password always gets through.
    assert login(Client(REMOTE_ADDR=OPERATOR), "ops-lead", PASSWORD) == 302
    fresh = Client(REMOTE_ADDR="203.0.113.200")
    assert login(fresh, "ops-lead") == 200
    assert login(fresh, "ops-lead") == 429


def test_a_request_without_an_address_counts_in_the_unknown_bucket(operator, settings) -> None:  # type: ignore[no-untyped-def]
    settings.ADMIN_LOGIN_MAX_FAILURES_UNKNOWN_ADDRESS = 3
    unix_socket = Client(REMOTE_ADDR="")
    assert [login(unix_socket, someone()) for _ in range(3)] == [200] * 3
    assert list(AdminLoginFailure.objects.values_list("client_ip", flat=True)) == [None] * 3  # counted, not skipped
    assert login(unix_socket, someone()) == 429
    assert login(Client(REMOTE_ADDR=OPERATOR), "ops-lead", PASSWORD) == 302  # the unknown bucket is its own


FULLWIDTH = "".join(chr(ord(c) + 0xFEE0) for c in "ops-lead")  # U+FF4F ...: NFKC makes it "ops-lead"


def test_a_fullwidth_spelling_of_a_locked_username_is_the_same_lock(operator, settings) -> None:  # type: ignore[no-untyped-def]
    settings.ADMIN_LOGIN_MAX_FAILURES = 3
    guesser = Client(REMOTE_ADDR=ATTACKER)
    assert [login(guesser, "ops-lead") for _ in range(3)] == [200] * 3
    assert login(guesser, "ops-lead", PASSWORD) == 429
    assert login(guesser, FULLWIDTH, PASSWORD) == 429  # not a fresh counter for the same account
    # Control: the form does log a fullwidth spelling in as the account (so it must share the lock).
    assert login(Client(REMOTE_ADDR=OPERATOR), FULLWIDTH, PASSWORD) == 302


def test_ops_clear_a_lock_from_the_command_line(operator, settings, capsys) -> None:  # type: ignore[no-untyped-def]
    settings.ADMIN_LOGIN_MAX_FAILURES = 2
    locked = Client(REMOTE_ADDR=OPERATOR)
    login(locked, "ops-lead")
    login(locked, "ops-lead")
    login(Client(REMOTE_ADDR=ATTACKER), "ops-lead")
    assert login(locked, "ops-lead", PASSWORD) == 429

    call_command("admin_login_unlock", "--username", "ops-lead", "--address", OPERATOR)
    assert "forgot 2 failed login(s) of ops-lead from 198.51.100.7" in capsys.readouterr().out
    assert AdminLoginFailure.objects.filter(client_ip=ATTACKER).count() == 1  # only that pair's
    assert login(locked, "ops-lead", PASSWORD) == 302

    call_command("admin_login_unlock", "--username", "ops-lead")
    assert AdminLoginFailure.objects.count() == 0


# ---------------------------------------------------------------------------------------------------------------
# A lockout nobody can aim: known devices, and each rule's exact reach

PROXY = "127.0.0.1"  # an undeclared reverse proxy (no TRUSTED_PROXIES): every client has its address


def known_browser(cookie: str, remote: str) -> Client:
    """A browser that logged in before: it has the known-device cookie, and no session."""
    browser = Client(REMOTE_ADDR=remote)
    browser.cookies[KNOWN_DEVICE_COOKIE] = cookie
    return browser


def device_cookie_of_a_login(remote: str, username: str = "ops-lead") -> str:
    browser = Client(REMOTE_ADDR=remote)
    assert login(browser, username, PASSWORD) == 302
    morsel = browser.cookies[KNOWN_DEVICE_COOKIE]
    assert morsel["httponly"] and morsel["samesite"] == "Strict" and morsel["path"] == "/admin/login/"
    return morsel.value


def test_a_known_device_logs_in_through_the_username_and_address_locks(operator, settings) -> None:  # type: ignore[no-untyped-def]
    settings.ADMIN_LOGIN_MAX_FAILURES, settings.ADMIN_LOGIN_MAX_FAILURES_PER_ADDRESS = 5, 6
    settings.ADMIN_LOGIN_MAX_FAILURES_PER_USERNAME = 8
    cookie = device_cookie_of_a_login(PROXY)  # the operator logged in from this browser last week

    # Rented /64s make the username's failures; anyone behind the same proxy locks its address.
    assert [login(Client(REMOTE_ADDR=f"2001:db8:0:{i:x}::1"), "ops-lead") for i in range(8)] == [200] * 8
    stranger = Client(REMOTE_ADDR=PROXY)
    assert [login(stranger, someone()) for _ in range(6)] == [200] * 6

    # The operator, from their own browser, even after a typo of their own: in.
    browser = known_browser(cookie, PROXY)
    assert login(browser, "ops-lead", "typo") == 200
    assert login(browser, "ops-lead", PASSWORD) == 302
    # Control: the same password from a browser the throttle does not know is refused by both locks.
    assert login(Client(REMOTE_ADDR=PROXY), "ops-lead", PASSWORD) == 429  # the proxy's address is locked
    new_laptop = Client(REMOTE_ADDR="198.51.100.9")
    assert login(new_laptop, "ops-lead", "typo") == 200
    assert login(new_laptop, "ops-lead", PASSWORD) == 429  # the username's lock: this address has failed


def test_a_known_device_gets_its_own_five_guesses_and_only_for_its_account(operator, settings) -> None:  # type: ignore[no-untyped-def]
    settings.ADMIN_LOGIN_MAX_FAILURES = 5
    cookie = device_cookie_of_a_login(OPERATOR)
    stolen = known_browser(cookie, "203.0.113.1")
    assert [login(stolen, "ops-lead") for _ in range(5)] == [200] * 5
    assert login(known_browser(cookie, "203.0.113.2"), "ops-lead", PASSWORD) == 429  # its lock follows the cookie
    assert "" not in set(AdminLoginFailure.objects.values_list("device", flat=True))
    # For another account, or tampered with: no exemption, the address's counters apply.
    settings.ADMIN_LOGIN_MAX_FAILURES_PER_ADDRESS = 2
    tampered = cookie[:-2] + ("xx" if not cookie.endswith("xx") else "yy")
    assert login(known_browser(cookie, ATTACKER), someone()) == 200
    assert login(known_browser(tampered, ATTACKER), "ops-lead") == 200
    assert list(AdminLoginFailure.objects.filter(client_ip=ATTACKER).values_list("device", flat=True)) == [""] * 2
    assert login(known_browser(tampered, ATTACKER), "ops-lead", PASSWORD) == 429
    # Control: a success from the device forgets its failures and gives it a fresh id.
    AdminLoginFailure.objects.filter(client_ip=ATTACKER).delete()
    settings.ADMIN_LOGIN_MAX_FAILURES = 6
    again = known_browser(cookie, OPERATOR)
    assert login(again, "ops-lead", PASSWORD) == 302
    assert AdminLoginFailure.objects.count() == 0
    assert again.cookies[KNOWN_DEVICE_COOKIE].value != cookie


def test_a_success_forgets_only_its_own_usernames_failures_of_the_address(operator, settings) -> None:  # type: ignore[no-untyped-def]
    """A sprayer with an account of their own cannot reset their address's counter by logging in."""
    settings.ADMIN_LOGIN_MAX_FAILURES_PER_ADDRESS = 4
    get_user_model().objects.create_user("intern", password=PASSWORD, is_staff=True)
    sprayer = Client(REMOTE_ADDR=ATTACKER)
    assert [login(sprayer, someone()) for _ in range(3)] == [200] * 3
    assert login(sprayer, "intern", "typo") == 200
    assert login(Client(REMOTE_ADDR=ATTACKER), "intern", "typo") == 429  # four failures: the address is locked
    AdminLoginFailure.objects.filter(username="intern").delete()
    assert login(sprayer, "intern", PASSWORD) == 302
    assert AdminLoginFailure.objects.filter(client_ip=ATTACKER).count() == 3  # the other usernames' stay
    assert login(Client(REMOTE_ADDR=ATTACKER), someone()) == 200
    assert login(Client(REMOTE_ADDR=ATTACKER), someone()) == 429


def test_the_usernames_lock_blocks_an_address_that_failed_only_for_other_usernames(operator, settings) -> None:  # type: ignore[no-untyped-def]
    settings.ADMIN_LOGIN_MAX_FAILURES, settings.ADMIN_LOGIN_MAX_FAILURES_PER_USERNAME = 5, 8
    assert [login(Client(REMOTE_ADDR=f"203.0.113.{i}"), "ops-lead") for i in range(1, 9)] == [200] * 8
    sprayer = Client(REMOTE_ADDR="203.0.113.99")
    assert login(sprayer, someone()) == 200  # a failure, for another username
    assert login(sprayer, "ops-lead", PASSWORD) == 429  # no fresh guess at the locked account
    # Control: an address with no failure at all still gets in.
    assert login(Client(REMOTE_ADDR=OPERATOR), "ops-lead", PASSWORD) == 302


@pytest.mark.parametrize("written", ["::ffff:198.51.100.7", "198.51.100.7", "[::ffff:198.51.100.7]:443"])
def test_unlock_reads_an_address_exactly_as_the_throttle_does(operator, settings, capsys, written) -> None:  # type: ignore[no-untyped-def]
    settings.ADMIN_LOGIN_MAX_FAILURES = 2
    mapped = Client(REMOTE_ADDR="::ffff:198.51.100.7")  # a dual-stack socket's peer
    assert [login(mapped, "ops-lead") for _ in range(2)] == [200] * 2
    assert list(AdminLoginFailure.objects.values_list("client_ip", flat=True)) == [OPERATOR] * 2
    assert login(mapped, "ops-lead", PASSWORD) == 429

    call_command("admin_login_unlock", "--address", written)
    assert "forgot 2 failed login(s)" in capsys.readouterr().out
    assert login(mapped, "ops-lead", PASSWORD) == 302


def test_unlock_refuses_what_is_not_an_address(operator) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CommandError, match="not an IP address"):
        call_command("admin_login_unlock", "--address", "proxy.internal")


# ---------------------------------------------------------------------------------------------------------------
# A known device expires, travels over HTTPS only in production, and can be revoked


def device_id(cookie: str) -> str:
    return signing.loads(cookie, salt=KNOWN_DEVICE_SALT)[1]  # type: ignore[no-any-return]


def test_a_known_device_is_revoked_one_by_one_and_all_at_once(operator, settings, capsys) -> None:  # type: ignore[no-untyped-def]
    settings.ADMIN_LOGIN_MAX_FAILURES_PER_ADDRESS = 2
    laptop, phone = device_cookie_of_a_login(PROXY), device_cookie_of_a_login(PROXY)
    stranger = Client(REMOTE_ADDR=PROXY)
    assert [login(stranger, someone()) for _ in range(2)] == [200] * 2  # the proxy's address is locked
    assert login(Client(REMOTE_ADDR=PROXY), "ops-lead", PASSWORD) == 429  # an unknown browser
    assert login(known_browser(laptop, PROXY), "ops-lead", "typo") == 200  # a known one: its own counter

    call_command("admin_known_devices")
    listed = capsys.readouterr().out
    assert device_id(laptop) in listed and device_id(phone) in listed and "2 known device(s)" in listed
    call_command("admin_known_devices", "--revoke", device_id(laptop))
    assert login(known_browser(laptop, PROXY), "ops-lead", "typo") == 429  # revoked: the address's lock applies
    assert login(known_browser(phone, PROXY), "ops-lead", "typo") == 200  # the other one is still known
    call_command("admin_known_devices", "--revoke-all", "--username", "someone-else")
    assert login(known_browser(phone, PROXY), "ops-lead", "typo") == 200  # another account's: untouched

    call_command("admin_known_devices", "--revoke-all")
    assert "revoked 1 known device(s)" in capsys.readouterr().out
    assert login(known_browser(phone, PROXY), "ops-lead", "typo") == 429
    with pytest.raises(CommandError, match="no known device"):
        call_command("admin_known_devices", "--revoke", device_id(phone))


def test_the_known_device_cookie_has_a_lifetime_and_is_secure_in_production(operator, settings) -> None:  # type: ignore[no-untyped-def]
    settings.PRODUCTION, settings.SESSION_COOKIE_SECURE = True, True  # as the production settings set them
    browser = Client(REMOTE_ADDR=OPERATOR)
    assert login(browser, "ops-lead", PASSWORD) == 302
    morsel = browser.cookies[KNOWN_DEVICE_COOKIE]
    assert int(morsel["max-age"]) == KNOWN_DEVICE_MAX_AGE_SECONDS == 90 * 24 * 3600
    assert morsel["secure"] is True
    # Control: development serves plain HTTP, where a Secure cookie would never come back.
    settings.PRODUCTION, settings.SESSION_COOKIE_SECURE = False, False
    plain = Client(REMOTE_ADDR=OPERATOR)
    assert login(plain, "ops-lead", PASSWORD) == 302
    assert not plain.cookies[KNOWN_DEVICE_COOKIE]["secure"]


class SignedDaysAgo(signing.TimestampSigner):
    """Signs as ``signing.dumps`` does, with a timestamp ``days`` in the past."""

    def __init__(self, days: int, **kwargs: str) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.days = days

    def timestamp(self) -> str:
        return signing.b62_encode(int(time.time()) - self.days * 24 * 3600)


@pytest.mark.parametrize(("days", "honoured"), [(89, True), (91, False)], ids=["89-days-old", "91-days-old"])
def test_a_known_device_cookie_older_than_its_lifetime_is_not_honoured(operator, days, honoured) -> None:  # type: ignore[no-untyped-def]
    device = device_id(device_cookie_of_a_login(OPERATOR))
    request = RequestFactory().post("/admin/login/")
    request.COOKIES[KNOWN_DEVICE_COOKIE] = SignedDaysAgo(days, salt=KNOWN_DEVICE_SALT).sign_object(["ops-lead", device])
    assert (known_device(request, "ops-lead") == device) is honoured
