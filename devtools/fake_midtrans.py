"""A local fake of the Midtrans API for the tests (never shipped): Snap's session endpoint and the Core API's status
and expire endpoints, in the shapes Midtrans documents, on a threaded HTTP server on 127.0.0.1.

A test drives what the gateway knows (:meth:`FakeMidtrans.pay`), builds documented notification bodies signed with
the real SHA-512 signature (:meth:`FakeMidtrans.notification`), and makes an endpoint stop answering
(:meth:`FakeMidtrans.stall`: the request waits, without sleeping, until the test releases it or the server stops),
so the shop's timeouts are exercised over real sockets. Like Midtrans, Snap refuses a second transaction with an
``order_id`` it has seen (HTTP 400), even one whose answer the shop never received (:meth:`FakeMidtrans.lose_answer`).
"""

import base64
import itertools
import json
import secrets
import sys
import threading
import traceback
from collections.abc import Callable
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from payments.midtrans import signature
from skincare.demo import TEST_MIDTRANS_SERVER_KEY

# transaction_status -> the status_code Midtrans puts beside it.
STATUS_CODES = {
    "capture": "200",
    "settlement": "200",
    "pending": "201",
    "deny": "202",
    "cancel": "200",
    "expire": "407",
    "refund": "200",
    "partial_refund": "200",
}


class FakeMidtrans:
    def __init__(self, *, server_key: str = TEST_MIDTRANS_SERVER_KEY) -> None:
        self.server_key = server_key
        self.transactions: dict[str, dict[str, Any]] = {}
        self.snap_requests: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request, in order
        self.stalled: set[str] = set()  # "snap", "status", "expire"
        # endpoint -> (bytes, interval): the answer is sent a few bytes at a time, one write per interval, so each
        # read of the client is answered within its socket timeout while the whole answer takes longer.
        self.dripping: dict[str, tuple[int, float]] = {}
        self.snap_order_ids: list[str] = []  # the order_id of every Snap transaction created, in order
        self.lose_snap_answers = 0  # the next N Snap transactions are created, then their answer is lost
        self.release = threading.Event()
        # Called on the handling thread with (method, path) before each answer (a test's probe of the shop's state).
        self.on_request: Callable[[str, str], None] | None = None
        # Called with the endpoint ("snap", "status", "expire") before each answer: None answers normally, "500" an
        # internal error, ("wait", seconds) first waits that long (a slow or, past the shop's deadline, a timing-out
        # gateway): the payment chaos proof's faults (devtools/payment_chaos.py).
        self.chaos: Callable[[str], object] | None = None
        self.snap_tokens: dict[str, str] = {}  # a Snap page's token -> its transaction's order_id
        self._ids = itertools.count(1)
        self._instance = secrets.token_hex(3)
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.server.handle_error = self._handle_error  # type: ignore[method-assign]
        self.base_url = f"http://127.0.0.1:{self.server.server_port}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="fake-midtrans", daemon=True)

    @staticmethod
    def _handle_error(request: object, client_address: object) -> None:
        """A client that gave up (the shop's deadline) before the answer was written is no error of the fake's."""
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            traceback.print_exc()

    def __enter__(self) -> "FakeMidtrans":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def lose_answer(self) -> None:
        """The next Snap transaction is created, then its answer never arrives (the shop's timeout fires first)."""
        self.lose_snap_answers += 1

    def gateway_order_id(self, order_id: int) -> str:
        """The ``order_id`` of the order's newest Snap transaction (``<order>-<attempt>``), or the order id alone."""
        ids = [i for i in self.snap_order_ids if i.partition("-")[0] == str(order_id)]
        return ids[-1] if ids else str(order_id)

    def drip(self, endpoint: str, *, chunks: int, interval: float) -> None:
        """``endpoint`` answers in ``chunks`` writes, ``interval`` seconds apart (a slow gateway, not a dead one)."""
        self.dripping[endpoint] = (chunks, interval)

    def stall(self, *endpoints: str) -> None:
        """These endpoints stop answering until :attr:`release` is set (the shop's timeout fires first)."""
        self.stalled.update(endpoints)

    def pay(
        self,
        order_id: int | None = None,
        *,
        gateway_order_id: str | None = None,
        status: str = "settlement",
        fraud_status: str = "accept",
        gross_amount: str | Decimal = "0.00",
        currency: str = "IDR",
    ) -> dict[str, Any]:
        """The buyer acted on the Snap page: the transaction of ``order_id`` (its newest, or the one named
        ``gateway_order_id``, which need not be one the shop created) now has ``status``."""
        with self._lock:
            key = gateway_order_id or self.gateway_order_id(order_id)
            existing = self.transactions.get(key)
            # Unique across fakes, as Midtrans's are (a shop's database outlives one fake: its event ids name them).
            transaction_id = existing["transaction_id"] if existing else f"fake-tx-{self._instance}-{next(self._ids)}"
            record = {
                "status_code": STATUS_CODES.get(status, "200"),
                "status_message": "Success, transaction is found",
                "transaction_id": transaction_id,
                "order_id": key,
                "gross_amount": f"{Decimal(gross_amount):.2f}",
                "currency": currency,
                "payment_type": "bank_transfer",
                "transaction_time": "2026-12-01 10:00:00",
                "transaction_status": status,
                "fraud_status": fraud_status,
            }
            self.transactions[key] = record
            return dict(record)

    def notification(
        self, order_id: int | None = None, *, gateway_order_id: str | None = None, signature_key: str | None = None
    ) -> bytes:
        """The HTTP notification Midtrans would POST for the transaction's current state (the order's newest, or
        the one named ``gateway_order_id``), signed with the server key (``signature_key`` overrides it)."""
        record = dict(self.transactions[gateway_order_id or self.gateway_order_id(order_id)])
        record["signature_key"] = signature_key or signature(
            order_id=record["order_id"],
            status_code=record["status_code"],
            gross_amount=record["gross_amount"],
            server_key=self.server_key,
        )
        return json.dumps(record).encode()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return None

            def _answer(self, status: int, body: dict[str, Any], endpoint: str = "") -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                if endpoint not in fake.dripping:
                    self.wfile.write(raw)
                    return
                chunks, interval = fake.dripping[endpoint]
                size = -(-len(raw) // chunks)
                for start in range(0, len(raw), size):
                    self.wfile.write(raw[start : start + size])
                    self.wfile.flush()
                    fake.release.wait(interval)  # the fake's pace; the test releases it when it is done

            def _authorised(self) -> bool:
                expected = "Basic " + base64.b64encode(f"{fake.server_key}:".encode()).decode()
                return self.headers.get("Authorization") == expected

            def _route(self, method: str) -> None:
                fake.requests.append((method, self.path))
                if fake.on_request is not None:
                    fake.on_request(method, self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                parts = self.path.strip("/").split("/")
                if method == "POST" and self.path == "/snap/v1/transactions":
                    endpoint = "snap"
                elif len(parts) == 3 and parts[0] == "v2" and parts[2] in ("status", "expire"):
                    endpoint = parts[2]
                else:
                    self._answer(404, {"status_code": "404", "status_message": "Not found"})
                    return
                if endpoint in fake.stalled:
                    fake.release.wait(30)
                    return  # the client gave up long ago
                fault = fake.chaos(endpoint) if fake.chaos is not None else None
                if fault == "500":
                    self._answer(500, {"status_code": "500", "status_message": "Internal server error (chaos)"})
                    return
                if isinstance(fault, tuple) and fault[0] == "wait":
                    fake.release.wait(fault[1])
                if not self._authorised():
                    self._answer(401, {"status_code": "401", "status_message": "Unauthorized"})
                    return
                if endpoint == "snap":
                    fake.snap_requests.append(body)
                    order_id = str(body["transaction_details"]["order_id"])
                    with fake._lock:
                        if order_id in fake.snap_order_ids:
                            message = "transaction_details.order_id has already been taken"
                            self._answer(400, {"status_code": "400", "error_messages": [message]})
                            return
                        fake.snap_order_ids.append(order_id)
                        lost, fake.lose_snap_answers = fake.lose_snap_answers > 0, max(fake.lose_snap_answers - 1, 0)
                    if lost:
                        fake.release.wait(30)
                        return  # created, and the client gave up long ago
                    token = f"snap-token-{next(fake._ids)}"
                    fake.snap_tokens[token] = order_id
                    self._answer(201, {"token": token, "redirect_url": f"{fake.base_url}/snap/v4/redirection/{token}"})
                    return
                with fake._lock:
                    record = fake.transactions.get(parts[1])
                    if record is None:  # Midtrans answers "no such transaction" with HTTP 200 and status_code 404
                        self._answer(200, {"status_code": "404", "status_message": "Transaction doesn't exist."})
                        return
                    if endpoint == "expire":
                        if record["transaction_status"] != "pending":
                            self._answer(200, {"status_code": "412", "status_message": "Cannot be updated."})
                            return
                        record.update(transaction_status="expire", status_code="407")
                    answer = dict(record)
                self._answer(200, answer, endpoint)

            def do_GET(self) -> None:
                self._route("GET")

            def do_POST(self) -> None:
                self._route("POST")

        return Handler
