"""The sweeper (``manage.py expire_reservations``): one sweep of the orders whose payment window has closed
(``orders.services.orders_expire_due``, in batches, after asking the payment gateway about those with a gateway
session: ``payments.sessions.sessions_check_due``), or with ``--loop`` a worker that sweeps every ``--interval``
seconds, advances the waiting room's admissions, prunes every app's short-lived rows and runs the alerts' database
probe."""

import signal
import threading
import time
import uuid
from http.server import ThreadingHTTPServer
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, close_old_connections

from backoffice.retention import retention_prune
from backoffice.sweeper_probes import Probe
from orders import selectors, services
from payments.sessions import SessionCheck, sessions_check_due
from skincare import metrics
from skincare.db import is_connection_failure
from skincare.errors import DatabaseUnavailable, DomainError, ServiceBusy
from skincare.metrics import start_metrics_server
from waitingroom.metrics import QueueCollector
from waitingroom.services import queues_advance


def install_stop_handlers(stop: threading.Event) -> dict[int, Any]:
    """SIGTERM and SIGINT set ``stop``; returns the handlers they replace (none off the main thread, where signal
    handlers cannot be installed). The handler hands the set() to a thread: a handler runs on the main thread between
    bytecodes and could interrupt stop.wait() while it holds the event's internal (non-reentrant) lock; calling
    stop.set() right there would deadlock."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def request_stop(*_: Any) -> None:
        threading.Thread(target=stop.set, name="expire-reservations-stop", daemon=True).start()

    return {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}


class Command(BaseCommand):
    help = (
        "Expire reservations of orders whose payment window has closed (database clock) and return their units. "
        "Safe to run as many copies at once as you like: each batch claims its orders with FOR UPDATE SKIP LOCKED."
    )

    def add_arguments(self, parser):
        parser.add_argument("--batch-size", type=int, default=200, help="orders per transaction (default 200)")
        parser.add_argument(
            "--loop", action="store_true", help="keep sweeping (and pruning, see prune_retention) until SIGTERM/SIGINT"
        )
        parser.add_argument("--interval", type=float, default=60.0, help="seconds between sweeps with --loop")
        parser.add_argument(
            "--metrics-port",
            type=int,
            default=None,
            help="serve this process's Prometheus metrics (skincare_sweeper_*) on this port (0 = off)",
        )
        parser.add_argument(
            "--metrics-addr", default="127.0.0.1", help="address for --metrics-port (default 127.0.0.1)"
        )
        parser.add_argument(
            "--audit-every",
            type=float,
            default=0.0,
            help="with --loop: run the consistency audit every this many seconds and export its result "
            "(skincare_audit_violations; 0 = never, the default)",
        )

    # Not a command-line option: lets code that runs the command in-process (tests, an embedding
    # scheduler) ask a --loop run to stop, exactly as SIGTERM/SIGINT do.
    stealth_options = ("stop_event",)

    def handle(
        self,
        *args,
        batch_size,
        loop,
        interval,
        metrics_port=None,
        metrics_addr="127.0.0.1",
        audit_every=0.0,
        stop_event=None,
        **options,
    ):
        # --verbosity 0 (make run's sweeper every 2 s): a sweep that returned nothing prints nothing.
        self.quiet_when_idle = options.get("verbosity", 1) == 0
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        if interval < 0:
            raise CommandError("--interval must not be negative")
        if audit_every < 0:
            raise CommandError("--audit-every must not be negative")
        stop = stop_event if stop_event is not None else threading.Event()
        # This run's name on the orders it leases to ask the gateway about (payments.sessions.sessions_check_due).
        self.sweeper = uuid.uuid4().hex
        # The handlers go in before anything is printed: a supervisor that sends SIGTERM as soon as the worker
        # speaks must get a clean stop, not the default kill.
        previous_handlers = install_stop_handlers(stop) if loop else {}
        metrics_server = None
        try:
            if metrics_port:
                metrics_server = self.serve_metrics(metrics_port, metrics_addr)
            probe = Probe(interval=interval, audit_every=audit_every) if loop else None
            while True:
                self.run_once(batch_size=batch_size, loop=loop, interval=interval, stop=stop)
                if probe is not None:  # the alerts' view of the database (backoffice/sweeper_probes.py)
                    probe.run()
                if not loop or stop.wait(interval):
                    break
                close_old_connections()
        finally:
            for sig, handler in previous_handlers.items():
                signal.signal(sig, handler)
            if metrics_server is not None:
                metrics_server.shutdown()
                metrics_server.server_close()
        if loop:
            self.stdout.write("expire_reservations: stopped")

    def serve_metrics(self, port: int, addr: str) -> ThreadingHTTPServer:
        """This process's Prometheus metrics on ``port``, protected by METRICS_TOKEN like the web's /metrics."""
        try:
            server, _thread = start_metrics_server(port, addr=addr, scrape_collectors=[QueueCollector()])
        except ValueError as exc:
            raise CommandError(f"expire_reservations: {exc}") from None
        self.stdout.write(f"expire_reservations: metrics on http://{addr}:{server.server_port}/metrics")
        return server

    def run_once(self, *, batch_size: int, loop: bool, interval: float, stop: threading.Event) -> None:
        """One sweep; in a loop, then the waiting room's admissions (docs/queue.md) and the retention pruning (what
        `manage.py prune_retention` does; its counts go to the log, not to stdout). A busy or unreachable database
        ends a one-shot run with exit code 1 and is reported and tried again at the next interval of a loop."""
        try:
            self.sweep(batch_size=batch_size, stop=stop)
            if loop:
                queues_advance()
                retention_prune()
        except (DomainError, DatabaseError) as exc:
            error = self.retryable(exc)
            if not loop:
                # Every batch is one transaction: what committed is done, the rest is due again and the next run
                # finishes it.
                raise CommandError(f"expire_reservations: {error.message} ({error.code})") from exc
            self.stderr.write(f"expire_reservations: {error.message} ({error.code}); next sweep in {interval}s")

    @staticmethod
    def retryable(exc: Exception) -> DomainError:
        """The busy or unavailable error that ``exc`` stands for; anything else is a bug and is raised."""
        if isinstance(exc, (ServiceBusy, DatabaseUnavailable)):
            return exc
        if isinstance(exc, DatabaseError) and is_connection_failure(exc):
            return DatabaseUnavailable()
        raise exc

    def sweep(self, *, batch_size, stop):
        """Run batches until nothing is due (or a stop was asked for, after the current batch)."""
        summary = selectors.overdue_summary()
        totals = services.SweepBatch()
        batches = 0
        asked = SessionCheck()
        while not stop.is_set():
            # The payment gateway's word first, outside any lock (paid there → paid here); then the batches claim
            # only the orders due by the time it was asked, and none that another sweeper is asking about.
            check = sessions_check_due(limit=batch_size, sweeper=self.sweeper)
            asked.recovered += check.recovered
            asked.expired += check.expired
            asked.unreachable += check.unreachable
            batch = services.orders_expire_due(batch_size=batch_size, due_by=check.due_by, skip=check.elsewhere)
            if not batch.orders:
                if check.more and check.recovered:
                    continue  # every order asked about was paid there: ask about the next ones
                break
            batches += 1
            metrics.SWEEPER_BATCHES.inc()
            metrics.SWEEPER_CANCELLED_ORDERS.inc(batch.orders)
            metrics.SWEEPER_EXPIRED_RESERVATIONS.inc(batch.reservations)
            totals.orders += batch.orders
            totals.reservations += batch.reservations
            totals.units += batch.units
            totals.oldest_overdue_seconds = max(totals.oldest_overdue_seconds, batch.oldest_overdue_seconds)
        metrics.SWEEPER_OLDEST_OVERDUE.set(totals.oldest_overdue_seconds)
        metrics.SWEEPER_LAST_SWEEP.set(time.time())
        if totals.orders or not getattr(self, "quiet_when_idle", False):
            self.stdout.write(
                f"expire_reservations: {totals.orders} orders cancelled (payment_timeout), "
                f"{totals.reservations} reservations expired, {totals.units} units returned in {batches} batches; "
                f"due when started: {summary['count']}, oldest overdue {totals.oldest_overdue_seconds:.1f}s"
            )
        if asked.recovered or asked.expired or asked.unreachable:
            self.stdout.write(
                f"expire_reservations: payment gateway asked first: {asked.recovered} paid there (recovered), "
                f"{asked.expired} open there (expired there first), {asked.unreachable} unanswered (marked for "
                "reconcile_payments)"
            )
        return totals
