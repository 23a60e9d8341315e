"""Concurrent wrong passwords from one address: the admin login throttle counts each attempt before it lets it
through (``skincare.login_throttle.admit``), so at most ``ADMIN_LOGIN_MAX_FAILURES`` reach the password check.

Real threads, each with its own database connection, released together by a barrier, post a wrong password for
one account from one address. The race is made as wide as it can be: every attempt the throttle let through is held
at the password check (an authentication backend waiting on a second barrier) until every attempt has either
arrived there or been refused. The control runs the same race against check-then-record (the counters are read
before the password check and the failure written after it): every attempt passes the check before the first
failure is written, so all of them reach the password check."""

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.test import Client

from devtools.testing import lock_waiters, run_concurrently, wait_until
from skincare import login_throttle
from skincare.models import AdminLoginFailure
from skincare.tests.test_client_address import login

pytestmark = pytest.mark.django_db(transaction=True)

ATTEMPTS, LIMIT = 12, 5
ATTACKER = "203.0.113.66"


class Gate:
    """The barrier every attempt meets once it is either at the password check or refused."""

    barrier: threading.Barrier | None = None

    @classmethod
    def wait(cls) -> None:
        assert cls.barrier is not None
        cls.barrier.wait(timeout=60)


class GatedBackend(ModelBackend):
    """Django's backend, holding each attempt at the password check until every attempt has got this far or been
    refused."""

    def authenticate(self, request: Any, username: str | None = None, password: str | None = None, **kw: Any) -> Any:
        Gate.wait()
        return super().authenticate(request, username=username, password=password, **kw)


@pytest.fixture
def race(settings) -> Iterator[None]:  # type: ignore[no-untyped-def]
    get_user_model().objects.create_user("ops-lead", password="right-password-for-tests", is_staff=True)
    settings.ADMIN_LOGIN_MAX_FAILURES = LIMIT
    settings.AUTHENTICATION_BACKENDS = [f"{__name__}.GatedBackend"]
    Gate.barrier = threading.Barrier(ATTEMPTS)
    yield
    Gate.barrier = None


def wrong_passwords_at_once() -> list[int]:
    """ATTEMPTS wrong passwords for one account from one address at once; their statuses."""

    def attempt(_: int) -> int:
        status = login(Client(REMOTE_ADDR=ATTACKER), "ops-lead")
        if status == 429:
            Gate.wait()  # refused: this attempt will never reach the password check
        return status

    outcomes = run_concurrently(ATTEMPTS, attempt)
    assert [o.error for o in outcomes if o.error] == []
    return [o.value for o in outcomes]


def test_concurrent_wrong_passwords_let_at_most_the_limit_through(race) -> None:  # type: ignore[no-untyped-def]
    statuses = wrong_passwords_at_once()
    assert sorted(statuses) == [200] * LIMIT + [429] * (ATTEMPTS - LIMIT)
    assert AdminLoginFailure.objects.filter(client_ip=ATTACKER).count() == LIMIT  # each one let through, recorded


def check_then_record(*, address: str | None, username: str, device: str | None) -> tuple[bool, int | None]:
    """The naive throttle: read the counters, let the attempt through, record its failure afterwards."""
    return not login_throttle.blocked(address=address, username=username, device=device), None


def test_control_check_then_record_lets_every_concurrent_attempt_through(race, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(login_throttle, "admit", check_then_record)
    statuses = wrong_passwords_at_once()
    assert statuses == [200] * ATTEMPTS  # every attempt passed the check before the first failure was written
    assert AdminLoginFailure.objects.filter(client_ip=ATTACKER).count() == statuses.count(200)


def test_the_count_and_the_record_are_taken_under_one_lock(race, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Inside ``admit``, between the count and the row's write, each attempt waits until every other attempt has
    also counted or is waiting for the counters' lock: without the lock all of them count before anyone writes."""
    counted = []
    count_lock = threading.Lock()
    real_blocked = login_throttle.blocked

    def blocked_then_wait(**counters: Any) -> bool:
        answer = real_blocked(**counters)
        with count_lock:
            counted.append(answer)
        wait_until(
            lambda: len(counted) + len(lock_waiters()) >= ATTEMPTS,
            what="every attempt counted or waiting for the counters' lock",
        )
        return answer

    monkeypatch.setattr(login_throttle, "blocked", blocked_then_wait)
    statuses = wrong_passwords_at_once()
    assert sorted(statuses) == [200] * LIMIT + [429] * (ATTEMPTS - LIMIT)
