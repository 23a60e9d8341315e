"""The sweeper loop command (``manage.py expire_reservations``, backoffice) as a process: its exit codes, a clean stop
on SIGTERM, and how a ``--loop`` run stops when asked in-process. The sweep itself: orders/tests/test_sweeper.py."""

import io
import queue
import signal
import subprocess
import threading

import pytest
from django.core.management import call_command
from django.db import connection

from devtools.testing import assert_invariants
from inventory.models import Inventory
from orders import services as order_services
from orders.models import Order
from orders.tests.test_sweeper import due_orders, manage, report, subprocess_env

pytestmark = pytest.mark.django_db(transaction=True)


def test_process_exit_codes(make_product, customer, settings):
    product = make_product(stock=5)
    due_orders(settings, customer, [[(product.pk, 2)]])

    ok = subprocess.run(  # noqa: S603 - our own interpreter and manage.py
        manage(), env=subprocess_env(), capture_output=True, text=True, timeout=60, check=False
    )
    bad = subprocess.run(  # noqa: S603
        manage("--batch-size", "0"), env=subprocess_env(), capture_output=True, text=True, timeout=60, check=False
    )

    assert ok.returncode == 0, ok.stderr
    assert report(ok.stdout)[0]["orders"] == 1
    assert bad.returncode == 1
    assert "--batch-size must be at least 1" in bad.stderr
    assert Inventory.objects.get(product=product).available_stock == 5
    assert_invariants()


def test_sigterm_stops_a_loop_run_cleanly(make_product, customer, settings):
    product = make_product(stock=20)
    due = due_orders(settings, customer, [[(product.pk, 1)]] * 3)
    proc = subprocess.Popen(  # noqa: S603 - our own interpreter and manage.py
        manage("--loop", "--interval", "3600", "--batch-size", "2"),
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True)
    reader.start()
    try:
        first = lines.get(timeout=60)  # the first sweep is done; the process now waits out its interval
        assert report(first)[0]["orders"] == 3
        proc.send_signal(signal.SIGTERM)
        returncode = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    reader.join(timeout=10)
    rest = []
    while not lines.empty():
        rest.append(lines.get())

    assert returncode == 0, proc.stderr.read()
    assert rest == ["expire_reservations: stopped\n"]
    assert set(Order.objects.filter(pk__in=[o.pk for o in due]).values_list("status", flat=True)) == {"cancelled"}
    assert_invariants()


# --------------------------------------------------------------------------------------------------------------
# In-process stop requests (the same event the signal handler sets)


class LineWatcher(io.StringIO):
    """A stdout that sets ``seen`` once a sweep report has been written."""

    def __init__(self):
        super().__init__()
        self.seen = threading.Event()

    def write(self, text):
        written = super().write(text)
        if "orders cancelled" in text:
            self.seen.set()
        return written


def run_command_in_thread(**options):
    result = {}

    def target():
        try:
            call_command("expire_reservations", **options)
        except BaseException as exc:
            result["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=target, name="sweeper-loop")
    thread.start()
    return thread, result


def test_loop_stops_during_its_wait_when_asked(make_product, customer, settings):
    product = make_product(stock=20)
    due_orders(settings, customer, [[(product.pk, 1)]] * 2)
    stop, out = threading.Event(), LineWatcher()

    thread, result = run_command_in_thread(loop=True, interval=3600, stop_event=stop, stdout=out)
    assert out.seen.wait(timeout=60), "the first sweep never reported"
    stop.set()
    thread.join(timeout=30)

    assert not thread.is_alive(), "the loop did not stop"
    assert result == {}
    sweeps = report(out.getvalue())
    assert len(sweeps) == 1
    assert sweeps[0]["orders"] == 2
    assert out.getvalue().endswith("expire_reservations: stopped\n")
    assert_invariants()


def test_loop_stop_takes_effect_after_the_current_batch(make_product, customer, settings, monkeypatch):
    """A stop requested while a batch runs lets that batch commit and starts no other."""
    product = make_product(stock=20)
    due = due_orders(settings, customer, [[(product.pk, 1)]] * 6)
    stop, out = threading.Event(), LineWatcher()
    real_batch = order_services.orders_expire_due
    batches = []

    def batch_then_stop(**kwargs):
        stop.set()  # the request arrives while this batch is running
        result = real_batch(**kwargs)
        batches.append(result)
        return result

    monkeypatch.setattr(order_services, "orders_expire_due", batch_then_stop)
    thread, result = run_command_in_thread(loop=True, interval=3600, batch_size=2, stop_event=stop, stdout=out)
    thread.join(timeout=60)

    assert not thread.is_alive(), "the loop did not stop"
    assert result == {}
    assert [b.orders for b in batches] == [2]
    (sweep,) = report(out.getvalue())
    assert (sweep["orders"], sweep["batches"], sweep["due"]) == (2, 1, 6)
    assert out.getvalue().endswith("expire_reservations: stopped\n")
    due_ids = [o.pk for o in due]
    assert Order.objects.filter(pk__in=due_ids, status="cancelled").count() == 2
    assert_invariants()  # the batch committed whole

    monkeypatch.undo()
    again = io.StringIO()
    call_command("expire_reservations", stdout=again)  # nothing was lost: the rest is swept next time
    assert report(again.getvalue())[0]["orders"] == 4
    assert Order.objects.filter(pk__in=due_ids, status="cancelled").count() == 6
    assert_invariants()


def test_loop_on_main_thread_installs_and_restores_signal_handlers(make_product, customer, settings):
    product = make_product(stock=5)
    due_orders(settings, customer, [[(product.pk, 1)]])
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    stop = threading.Event()
    stop.set()  # asked to stop before it starts: no batch runs, the wait returns at once
    out = io.StringIO()

    call_command("expire_reservations", loop=True, interval=3600, stop_event=stop, stdout=out)

    assert report(out.getvalue())[0]["orders"] == 0
    assert out.getvalue().endswith("expire_reservations: stopped\n")
    assert {sig: signal.getsignal(sig) for sig in before} == before
    assert Order.objects.get().status == "pending_payment"
