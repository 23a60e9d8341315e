"""Idle connections are health-checked when a request starts; busy ones are not (``skincare.connections``)."""

import pytest
from django.core.signals import request_finished, request_started
from django.db import connection, connections

from skincare import connections as connections_module

pytestmark = pytest.mark.django_db(transaction=True)


def persistent():
    """An open connection that Django keeps between requests (as with DB_CONN_MAX_AGE > 0 in production)."""
    connection.ensure_connection()
    connection.close_at = None


@pytest.fixture
def probes(monkeypatch):
    """How many times the connection was probed (``is_usable``: Django's SELECT 1 on a raw cursor)."""
    persistent()
    calls = []
    real = connection.is_usable

    def counting():
        calls.append(1)
        return real()

    monkeypatch.setattr(connection, "is_usable", counting)
    return calls


def test_a_connection_used_a_moment_ago_is_not_checked(monkeypatch, probes):
    monkeypatch.setattr(connections_module, "CHECK_AFTER_IDLE_SECONDS", 60.0)
    request_finished.send(sender=None)
    request_started.send(sender=None)
    assert probes == []


def test_an_idle_connection_is_checked_before_the_request_uses_it(monkeypatch, probes):
    monkeypatch.setattr(connections_module, "CHECK_AFTER_IDLE_SECONDS", 0.0)
    request_finished.send(sender=None)
    request_started.send(sender=None)
    assert probes == [1]
    assert connection.connection is not None  # alive: kept


def test_a_dead_idle_connection_is_closed_so_the_next_query_reconnects(monkeypatch):
    monkeypatch.setattr(connections_module, "CHECK_AFTER_IDLE_SECONDS", 0.0)
    persistent()
    pid = connection.connection.info.backend_pid
    other = connections.create_connection("default")
    with other.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    other.close()
    request_finished.send(sender=None)
    assert connection.connection is not None  # Django itself did not notice
    request_started.send(sender=None)
    assert connection.connection is None  # closed before the request could use it in a transaction
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        assert cursor.fetchone()[0] != pid
