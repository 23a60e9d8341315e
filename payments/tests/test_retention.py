"""prune_retention and the sweeper loop delete rows past their retention windows, and nothing younger."""

import io
import threading

import pytest
from django.core.management import call_command
from django.db import connection

from payments.models import ProcessedEvent

pytestmark = pytest.mark.django_db


def test_processed_events_are_pruned_after_their_retention(settings):
    settings.PROCESSED_EVENTS_RETENTION_DAYS = 30
    ProcessedEvent.objects.create(event_id="old")
    ProcessedEvent.objects.create(event_id="recent")
    with connection.cursor() as cursor:
        cursor.execute("UPDATE processed_events SET processed_at = now() - interval '31 days' WHERE event_id = 'old'")
        cursor.execute(
            "UPDATE processed_events SET processed_at = now() - interval '29 days' WHERE event_id = 'recent'"
        )
    out = io.StringIO()

    call_command("prune_retention", stdout=out)

    assert list(ProcessedEvent.objects.values_list("event_id", flat=True)) == ["recent"]
    assert "processed_events 1 deleted" in out.getvalue()


def test_the_sweeper_loop_prunes_too(settings):
    ProcessedEvent.objects.create(event_id="old")
    with connection.cursor() as cursor:
        cursor.execute("UPDATE processed_events SET processed_at = now() - interval '400 days'")
    stop = threading.Event()

    class StopAfterFirstSweep(io.StringIO):
        def write(self, text):
            if "orders cancelled" in text:
                stop.set()
            return super().write(text)

    call_command("expire_reservations", loop=True, interval=0, stop_event=stop, stdout=StopAfterFirstSweep())

    assert not ProcessedEvent.objects.exists()
