"""A local fake of Xendit's Invoice API for the tests (never shipped): create, get, list and expire invoices in the
shapes Xendit documents, on a threaded HTTP server on 127.0.0.1.

A test drives what the gateway knows (:meth:`FakeXendit.pay`), builds the callback Xendit would post for an invoice
(:meth:`FakeXendit.callback`: its headers, with the account's callback token, and its JSON body), makes an endpoint
stop answering (:attr:`FakeXendit.stalled`: the request, once past the key and the rate limit, sets
:attr:`FakeXendit.stall_reached` and waits, without sleeping, until the test sets :attr:`FakeXendit.release`, then is
handled and answered as usual, or until the server stops, then ends with no answer and no effect) and loses the
answers of created invoices (:attr:`FakeXendit.lose_answers`: the invoice exists, the connection closes with no
answer). Time is the injectable ``clock``: a PENDING invoice whose ``expiry_date`` has come reads as EXPIRED
everywhere, and the per-endpoint rate limit (HTTP 429 past ``limit_per_second`` requests in the last second) counts
arrivals by that clock, so a test steps time without sleeping.

Like Xendit, an ``external_id`` may name several invoices; the list endpoint answers them oldest first (all the
invoices when the query names no ``external_id``). The rate limit counts the requests it accepted: a refused one
(429) neither creates anything nor lengthens the wait.

Endpoints (names for :attr:`FakeXendit.stalled` and the rate limit):

- ``POST /v2/invoices`` ("create"), ``GET /v2/invoices/{id}`` ("get"), ``GET /v2/invoices?external_id=X`` ("list"),
  ``POST /invoices/{id}/expire!`` ("expire"): HTTP Basic with the secret key as user and an empty password, else 401.
- ``GET /web/{id}``: the buyer's invoice page, a trivial HTML page (no key, no rate limit).
"""

import base64
import binascii
import hmac
import html
import itertools
import json
import math
import secrets
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from skincare.demo import TEST_XENDIT_CALLBACK_TOKEN, TEST_XENDIT_SECRET_KEY

ENDPOINTS = ("create", "get", "list", "expire")
CURRENCIES = frozenset({"IDR", "PHP", "THB", "VND", "MYR", "USD"})
MAX_INVOICE_DURATION = 31_536_000  # seconds: Xendit's bound on invoice_duration (one year)
PAID_STATUSES = ("PAID", "SETTLED")
# The fields of an invoice that Xendit's invoice callback carries.
CALLBACK_FIELDS = (
    "id",
    "external_id",
    "status",
    "amount",
    "paid_amount",
    "currency",
    "payment_method",
    "paid_at",
    "created",
    "updated",
)
STALL_BOUND = 60.0  # seconds: a stalled request the test forgot to release ends anyway (no answer)


def iso_ms(epoch_ms: int) -> str:
    """``epoch_ms`` as Xendit writes instants: ISO-8601 UTC with milliseconds and "Z"."""
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class ValidationError(Exception):
    """The create request's body is not one Xendit accepts (HTTP 400 API_VALIDATION_ERROR)."""


class _Invoices(dict[str, dict[str, Any]]):
    """Invoice id -> the invoice as the API shows it: every read first turns the PENDING invoices whose expiry has
    come (by the fake's clock) into EXPIRED ones, so a test reading ``fake.invoices`` sees what a client would."""

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__()
        self._clock = clock
        self.expiry_ms: dict[str, int] = {}  # invoice id -> its expiry_date in epoch milliseconds

    def settle_expiry(self) -> None:
        now = int(self._clock() * 1000)
        for invoice_id, record in list(dict.items(self)):  # one C call: safe beside the server's inserts
            if record.get("status") == "PENDING" and now >= self.expiry_ms.get(invoice_id, now + 1):
                record["status"] = "EXPIRED"
                record["updated"] = record["expiry_date"]

    def __getitem__(self, key: str) -> dict[str, Any]:
        self.settle_expiry()
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        self.settle_expiry()
        return super().get(key, default)

    def values(self) -> Any:
        self.settle_expiry()
        return super().values()

    def items(self) -> Any:
        self.settle_expiry()
        return super().items()

    def __iter__(self) -> Iterator[str]:
        self.settle_expiry()
        return super().__iter__()


class FakeXendit:
    def __init__(
        self,
        *,
        secret_key: str = TEST_XENDIT_SECRET_KEY,
        callback_token: str = TEST_XENDIT_CALLBACK_TOKEN,
        limit_per_second: int | None = 10,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.secret_key = secret_key
        self.callback_token = callback_token
        self.limit_per_second = limit_per_second
        self.clock = clock
        self.base_url = ""  # "http://127.0.0.1:<port>" once started
        self._invoices = _Invoices(lambda: self.clock())  # follows a clock the test swaps in later
        self.invoices: dict[str, dict[str, Any]] = self._invoices
        self.requests: list[tuple[str, str]] = []  # (method, path incl. query) of every request, in order
        self.answered_429 = 0  # requests refused by the rate limit
        self.stalled: set[str] = set()  # endpoints ("create", "get", "list", "expire") whose requests wait
        self.release = threading.Event()  # set: stalled requests go on (and are answered)
        self.lose_answers = 0  # the next N created invoices are created, then the connection closes with no answer
        # Set when a request reaches a stall (a test's proof that the request is held, not merely slow).
        self.stall_reached = threading.Event()
        # Called on the handling thread with (method, path) as each request arrives (a test's probe).
        self.on_request: Callable[[str, str], None] | None = None
        self._arrivals: dict[str, deque[int]] = {endpoint: deque() for endpoint in ENDPOINTS}  # accepted, epoch ms
        self._webhook_ids = itertools.count(1)
        self._instance = secrets.token_hex(4)
        self._stopping = False
        self._lock = threading.RLock()
        self.server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # Life cycle.

    def start(self) -> "FakeXendit":
        if self.server is not None:
            return self
        self._stopping = False
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.server.handle_error = self._handle_error  # type: ignore[method-assign]
        self.base_url = f"http://127.0.0.1:{self.server.server_port}"
        # A short poll: stop() returns within 50 ms instead of serve_forever's default half second.
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-xendit", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the server: stalled requests end with no answer."""
        if self.server is None:
            return
        self._stopping = True
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        if self._thread is not None:
            self._thread.join()
        self.server = None
        self._thread = None

    def __enter__(self) -> "FakeXendit":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @staticmethod
    def _handle_error(request: object, client_address: object) -> None:
        """A client that gave up (its deadline) before the answer was written is no error of the fake's."""
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            traceback.print_exc()

    # What a test drives.

    def invoice_for(self, external_id: str) -> dict[str, Any] | None:
        """The newest invoice with that ``external_id`` (a copy), or None."""
        with self._lock:
            record = self._newest(external_id)
            return dict(record) if record is not None else None

    def pay(
        self,
        external_id: str,
        *,
        amount: int | None = None,
        currency: str | None = None,
        payment_method: str = "BANK_TRANSFER",
        status: str = "PAID",
    ) -> dict[str, Any]:
        """The buyer paid the newest invoice of ``external_id`` (whatever its status: a test may pay an expired one):
        it is now ``status`` (PAID or SETTLED) with ``paid_amount`` (``amount``, else its amount), ``currency`` (its
        own unless given), ``payment_method`` and ``paid_at`` now. Returns a copy of the invoice."""
        if status not in PAID_STATUSES:
            raise ValueError(f"status must be one of {PAID_STATUSES}, not {status!r}")
        with self._lock:
            record = self._newest(external_id)
            if record is None:
                raise KeyError(f"no invoice with external_id {external_id!r}")
            now = iso_ms(self._now_ms())
            record.update(
                status=status,
                paid_amount=record["amount"] if amount is None else amount,
                payment_method=payment_method,
                paid_at=now,
                updated=now,
            )
            if currency is not None:
                record["currency"] = currency
            return dict(record)

    def callback(
        self, invoice: dict[str, Any], *, webhook_id: str | None = None, token: str | None = None, **overrides: Any
    ) -> tuple[dict[str, str], bytes]:
        """The invoice callback Xendit would POST for ``invoice``: its headers (the account's callback token unless
        ``token`` is given, ``webhook_id`` or a new unique one) and its JSON body (the invoice's callback fields it
        has, then ``overrides``)."""
        headers = {
            "x-callback-token": self.callback_token if token is None else token,
            "webhook-id": webhook_id if webhook_id is not None else self._new_webhook_id(),
            "Content-Type": "application/json",
        }
        body = {field: invoice[field] for field in CALLBACK_FIELDS if field in invoice}
        body.update(overrides)
        return headers, json.dumps(body).encode()

    # Internals (callers hold the lock where it matters).

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _new_webhook_id(self) -> str:
        return f"fake-webhook-{self._instance}-{next(self._webhook_ids)}"

    def _newest(self, external_id: str) -> dict[str, Any] | None:
        matches = [record for record in self.invoices.values() if record["external_id"] == external_id]
        return matches[-1] if matches else None

    def _admit(self, endpoint: str) -> bool:
        """The rate limit: False when ``limit_per_second`` requests of ``endpoint`` were accepted in the last second
        (a sliding window of the clock: arrivals in (now - 1 s, now]); refused requests do not count."""
        if self.limit_per_second is None:
            return True
        now = self._now_ms()
        with self._lock:
            arrivals = self._arrivals[endpoint]
            while arrivals and arrivals[0] <= now - 1000:
                arrivals.popleft()
            if len(arrivals) >= self.limit_per_second:
                self.answered_429 += 1
                return False
            arrivals.append(now)
            return True

    def _create(self, body: object) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ValidationError("the body must be a JSON object")
        external_id = body.get("external_id")
        if not isinstance(external_id, str) or not external_id:
            raise ValidationError('"external_id" is required and must be a non-empty string')
        amount = body.get("amount")
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not math.isfinite(amount) or amount <= 0:
            raise ValidationError('"amount" is required and must be a positive number')
        currency = body.get("currency", "IDR")
        if currency not in CURRENCIES:
            raise ValidationError(f'"currency" must be one of {sorted(CURRENCIES)}')
        if isinstance(amount, float) and amount.is_integer():
            amount = int(amount)
        if currency == "IDR" and not isinstance(amount, int):
            raise ValidationError('"amount" in IDR must be a whole number')
        duration = body.get("invoice_duration")
        if isinstance(duration, bool) or not isinstance(duration, int) or not 0 < duration <= MAX_INVOICE_DURATION:
            raise ValidationError(f'"invoice_duration" is required: whole seconds, 1 to {MAX_INVOICE_DURATION}')
        optional = {}
        for field in ("description", "success_redirect_url", "failure_redirect_url"):
            if field in body:
                if not isinstance(body[field], str):
                    raise ValidationError(f'"{field}" must be a string')
                optional[field] = body[field]
        with self._lock:
            invoice_id = secrets.token_hex(12)
            while invoice_id in dict.keys(self.invoices):
                invoice_id = secrets.token_hex(12)
            created_ms = self._now_ms()
            expiry_ms = created_ms + duration * 1000
            record: dict[str, Any] = {
                "id": invoice_id,
                "external_id": external_id,
                "status": "PENDING",
                "amount": amount,
                "currency": currency,
                **optional,
                "invoice_url": f"{self.base_url}/web/{invoice_id}",
                "expiry_date": iso_ms(expiry_ms),
                "created": iso_ms(created_ms),
                "updated": iso_ms(created_ms),
            }
            self.invoices[invoice_id] = record
            self._invoices.expiry_ms[invoice_id] = expiry_ms
            return dict(record)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return None

            def _answer(self, status: int, body: object) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _error(self, status: int, error_code: str, message: str) -> None:
                self._answer(status, {"error_code": error_code, "message": message})

            def _no_answer(self) -> None:
                """Close the connection without a byte of answer (the client sees it end with no response)."""
                self.close_connection = True

            def _authorised(self) -> bool:
                scheme, _, encoded = (self.headers.get("Authorization") or "").partition(" ")
                if scheme.lower() != "basic":
                    return False
                try:
                    user, colon, password = base64.b64decode(encoded, validate=True).decode().partition(":")
                except (binascii.Error, UnicodeDecodeError):
                    return False
                return bool(colon) and password == "" and hmac.compare_digest(user, fake.secret_key)

            def _endpoint(self, method: str, parts: list[str]) -> str | None:
                if method == "POST" and parts == ["v2", "invoices"]:
                    return "create"
                if method == "GET" and parts == ["v2", "invoices"]:
                    return "list"
                if method == "GET" and len(parts) == 3 and parts[:2] == ["v2", "invoices"] and parts[2]:
                    return "get"
                if method == "POST" and len(parts) == 3 and parts[0] == "invoices" and parts[2] == "expire!":
                    return "expire"
                return None

            def _route(self, method: str) -> None:
                with fake._lock:
                    fake.requests.append((method, self.path))
                if fake.on_request is not None:
                    fake.on_request(method, self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                url = urlsplit(self.path)
                parts = url.path.strip("/").split("/")
                if method == "GET" and len(parts) == 2 and parts[0] == "web":
                    self._web_page(parts[1])
                    return
                endpoint = self._endpoint(method, parts)
                if endpoint is None:
                    self._error(404, "NOT_FOUND", f"{method} {url.path} is not an endpoint of this API")
                    return
                if not self._authorised():
                    self._error(401, "INVALID_API_KEY", "API key is invalid")
                    return
                if not fake._admit(endpoint):
                    self._error(429, "RATE_LIMIT_EXCEEDED", "Too many requests, try again later")
                    return
                if endpoint in fake.stalled:
                    fake.stall_reached.set()
                    fake.release.wait(STALL_BOUND)
                    if fake._stopping or not fake.release.is_set():
                        self._no_answer()
                        return
                if endpoint == "create":
                    self._create(raw)
                elif endpoint == "list":
                    external_ids = parse_qs(url.query).get("external_id")
                    with fake._lock:
                        found = [
                            dict(record)
                            for record in fake.invoices.values()
                            if external_ids is None or record["external_id"] in external_ids
                        ]
                    self._answer(200, found)
                else:
                    self._get_or_expire(endpoint, parts[1] if endpoint == "expire" else parts[2])

            def _create(self, raw: bytes) -> None:
                try:
                    invoice = fake._create(json.loads(raw) if raw else None)
                except (ValueError, ValidationError) as error:  # json.JSONDecodeError is a ValueError
                    message = str(error) if isinstance(error, ValidationError) else "the body is not valid JSON"
                    self._error(400, "API_VALIDATION_ERROR", message)
                    return
                with fake._lock:
                    lost, fake.lose_answers = fake.lose_answers > 0, max(fake.lose_answers - 1, 0)
                if lost:
                    self._no_answer()  # created, and its answer never arrives
                    return
                self._answer(200, invoice)

            def _get_or_expire(self, endpoint: str, invoice_id: str) -> None:
                with fake._lock:
                    record = fake.invoices.get(invoice_id)
                    if record is not None and endpoint == "expire":
                        if record["status"] != "PENDING":
                            record = None  # Xendit: only a PENDING invoice can be expired
                        else:
                            record.update(status="EXPIRED", updated=iso_ms(fake._now_ms()))
                    answer = dict(record) if record is not None else None
                if answer is None:
                    self._error(404, "INVOICE_NOT_FOUND_ERROR", f"Invoice {invoice_id} not found")
                    return
                self._answer(200, answer)

            def _web_page(self, invoice_id: str) -> None:
                record = fake.invoices.get(invoice_id)
                if record is None:
                    self.send_error(404)
                    return
                page = (
                    "<!doctype html><title>Fake Xendit invoice</title>"
                    f"<p>Invoice {record['id']} ({html.escape(record['external_id'])}): {record['status']}, "
                    f"{record['amount']} {record['currency']}</p>"
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def do_GET(self) -> None:
                self._route("GET")

            def do_POST(self) -> None:
                self._route("POST")

        return Handler
