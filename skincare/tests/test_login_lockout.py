"""An admin no stranger can lock (issue 27, item 4): failed logins are counted per (address, username), per address,
and per username far above those, and the username's lock never blocks an address that has not failed itself.
Ops clear a lock with ``python manage.py admin_login_unlock``."""

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

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
