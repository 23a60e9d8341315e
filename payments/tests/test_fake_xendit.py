"""The fake Xendit Invoice API (devtools/fake_xendit.py), driven over real sockets with plain urllib calls: the shapes
of create/get/list/expire, the key, validation, expiry by the (stepped) clock, the per-endpoint rate limit, stalls,
lost answers, pay() and callback(). No database; no sleeping (threads meet on Events)."""

import base64
import json
import re
import threading
import urllib.error
import urllib.request
from typing import Any

import pytest

from devtools.fake_xendit import CALLBACK_FIELDS, FakeXendit
from skincare.demo import TEST_XENDIT_CALLBACK_TOKEN, TEST_XENDIT_SECRET_KEY

START = 1_800_000_000.0  # 2027-01-15T08:00:00Z: the stepped clock's first instant
INSTANT = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
WAIT = 10  # seconds: the bound on any Event or join of a test (reached only when the fake misbehaves)


class SteppedClock:
    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def basic(user: str, password: str = "") -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def call(
    fake: FakeXendit,
    method: str,
    path: str,
    body: Any = None,
    *,
    authorization: str | None = basic(TEST_XENDIT_SECRET_KEY),
    raw: bytes | None = None,
) -> tuple[int, Any]:
    """(status, parsed JSON answer) of one request to the fake."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    if method == "POST" and data is None:
        data = b""
    headers = {"Content-Type": "application/json"}
    if authorization is not None:
        headers["Authorization"] = authorization
    request = urllib.request.Request(fake.base_url + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=WAIT) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def invoice_body(external_id: str = "order-1", **fields: Any) -> dict[str, Any]:
    return {
        "external_id": external_id,
        "amount": 150000,
        "invoice_duration": 3600,
        "description": "Order 1",
        **fields,
    }


def create(fake: FakeXendit, external_id: str = "order-1", **fields: Any) -> dict[str, Any]:
    status, invoice = call(fake, "POST", "/v2/invoices", invoice_body(external_id, **fields))
    assert status == 200, invoice
    return invoice


@pytest.fixture
def clock() -> SteppedClock:
    return SteppedClock()


@pytest.fixture
def xendit(clock: SteppedClock):
    with FakeXendit(clock=clock) as server:
        yield server


def test_create_answers_the_pending_invoice(xendit: FakeXendit) -> None:
    invoice = create(
        xendit,
        "order-7",
        success_redirect_url="https://shop.example/ok",
        failure_redirect_url="https://shop.example/failed",
    )

    assert re.fullmatch(r"[0-9a-f]{24}", invoice["id"])
    assert invoice == {
        "id": invoice["id"],
        "external_id": "order-7",
        "status": "PENDING",
        "amount": 150000,
        "currency": "IDR",  # the default
        "description": "Order 1",
        "success_redirect_url": "https://shop.example/ok",
        "failure_redirect_url": "https://shop.example/failed",
        "invoice_url": f"{xendit.base_url}/web/{invoice['id']}",
        "expiry_date": "2027-01-15T09:00:00.000Z",  # created + 3600 s
        "created": "2027-01-15T08:00:00.000Z",
        "updated": "2027-01-15T08:00:00.000Z",
    }
    assert xendit.invoices == {invoice["id"]: invoice}
    assert xendit.requests == [("POST", "/v2/invoices")]


def test_create_keeps_the_currency_and_milliseconds(xendit: FakeXendit, clock: SteppedClock) -> None:
    clock.now = START + 0.25
    invoice = create(xendit, amount=12.5, currency="USD", invoice_duration=60)

    assert (invoice["amount"], invoice["currency"]) == (12.5, "USD")  # a fraction outside IDR is fine
    assert invoice["created"] == "2027-01-15T08:00:00.250Z"
    assert invoice["expiry_date"] == "2027-01-15T08:01:00.250Z"
    assert INSTANT.match(invoice["updated"])


def test_several_invoices_may_share_an_external_id_and_list_answers_them_oldest_first(
    xendit: FakeXendit, clock: SteppedClock
) -> None:
    first = create(xendit, "order-1")
    clock.now += 1
    other = create(xendit, "order-2")
    second = create(xendit, "order-1", amount=99000)

    assert first["id"] != second["id"]
    status, listed = call(xendit, "GET", "/v2/invoices?external_id=order-1")
    assert status == 200
    assert listed == [first, second]
    assert call(xendit, "GET", "/v2/invoices?external_id=order-2") == (200, [other])
    assert call(xendit, "GET", "/v2/invoices?external_id=order-404") == (200, [])
    assert xendit.invoice_for("order-1") == second
    assert xendit.invoice_for("order-404") is None
    assert xendit.requests[-3] == ("GET", "/v2/invoices?external_id=order-1")  # the query is logged


def test_get_answers_the_invoice_or_404(xendit: FakeXendit) -> None:
    invoice = create(xendit)

    assert call(xendit, "GET", f"/v2/invoices/{invoice['id']}") == (200, invoice)
    status, error = call(xendit, "GET", "/v2/invoices/0123456789abcdef01234567")
    assert status == 404
    assert error["error_code"] == "INVOICE_NOT_FOUND_ERROR"
    assert error["message"]


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        basic("xnd_development_a_different_key"),
        basic(TEST_XENDIT_SECRET_KEY, "a-password"),  # the password must be empty
        basic(TEST_XENDIT_SECRET_KEY + "x"),
        "Bearer " + TEST_XENDIT_SECRET_KEY,
        "Basic not-base64!",
    ],
)
def test_every_endpoint_refuses_a_wrong_key_with_401(xendit: FakeXendit, authorization: str | None) -> None:
    invoice = create(xendit)  # with the right key (the control)
    requests = [
        ("POST", "/v2/invoices", invoice_body("order-2")),
        ("GET", f"/v2/invoices/{invoice['id']}", None),
        ("GET", "/v2/invoices?external_id=order-1", None),
        ("POST", f"/invoices/{invoice['id']}/expire!", None),
    ]
    for method, path, body in requests:
        status, error = call(xendit, method, path, body, authorization=authorization)
        assert status == 401, (method, path)
        assert error["error_code"] == "INVALID_API_KEY"
        assert error["message"]

    assert list(xendit.invoices) == [invoice["id"]]
    assert xendit.invoices[invoice["id"]]["status"] == "PENDING"


@pytest.mark.parametrize(
    "body",
    [
        {"amount": 150000, "invoice_duration": 3600},  # no external_id
        invoice_body(external_id=42),
        invoice_body(external_id=""),
        {"external_id": "order-1", "invoice_duration": 3600},  # no amount
        invoice_body(amount="150000"),
        invoice_body(amount=True),
        invoice_body(amount=0),
        invoice_body(amount=-5),
        invoice_body(amount=150000.5),  # a fraction of a rupiah
        invoice_body(currency="IDR", amount=0.01),
        invoice_body(currency="XXX"),
        {"external_id": "order-1", "amount": 150000},  # no invoice_duration (required here)
        invoice_body(invoice_duration="3600"),
        invoice_body(invoice_duration=3600.5),
        invoice_body(invoice_duration=0),
        invoice_body(description=7),
        invoice_body(success_redirect_url=["https://shop.example/ok"]),
        ["order-1", 150000],
    ],
)
def test_create_refuses_a_missing_or_invalid_field_with_400(xendit: FakeXendit, body: Any) -> None:
    status, error = call(xendit, "POST", "/v2/invoices", body)

    assert status == 400
    assert error["error_code"] == "API_VALIDATION_ERROR"
    assert error["message"]
    assert xendit.invoices == {}
    create(xendit)  # the control: the same fake takes a valid body
    assert len(xendit.invoices) == 1


def test_create_refuses_a_body_that_is_not_json(xendit: FakeXendit) -> None:
    status, error = call(xendit, "POST", "/v2/invoices", raw=b"external_id=order-1")

    assert (status, error["error_code"]) == (400, "API_VALIDATION_ERROR")
    assert xendit.invoices == {}


def test_expire_turns_a_pending_invoice_expired(xendit: FakeXendit, clock: SteppedClock) -> None:
    invoice = create(xendit)
    clock.now += 5

    status, expired = call(xendit, "POST", f"/invoices/{invoice['id']}/expire!")

    assert status == 200
    assert expired == {**invoice, "status": "EXPIRED", "updated": "2027-01-15T08:00:05.000Z"}
    assert call(xendit, "GET", f"/v2/invoices/{invoice['id']}") == (200, expired)
    status, error = call(xendit, "POST", f"/invoices/{invoice['id']}/expire!")  # not PENDING any more
    assert (status, error["error_code"]) == (404, "INVOICE_NOT_FOUND_ERROR")


@pytest.mark.parametrize("paid_status", ["PAID", "SETTLED"])
def test_expire_of_a_paid_invoice_is_404_and_it_stays_paid(xendit: FakeXendit, paid_status: str) -> None:
    invoice = create(xendit)
    xendit.pay("order-1", status=paid_status)

    status, error = call(xendit, "POST", f"/invoices/{invoice['id']}/expire!")

    assert (status, error["error_code"]) == (404, "INVOICE_NOT_FOUND_ERROR")
    assert call(xendit, "GET", f"/v2/invoices/{invoice['id']}")[1]["status"] == paid_status


def test_expire_of_an_unknown_invoice_is_404(xendit: FakeXendit) -> None:
    status, error = call(xendit, "POST", "/invoices/0123456789abcdef01234567/expire!")

    assert (status, error["error_code"]) == (404, "INVOICE_NOT_FOUND_ERROR")


def test_a_pending_invoice_past_its_expiry_date_reads_expired_everywhere(
    xendit: FakeXendit, clock: SteppedClock
) -> None:
    invoice = create(xendit, invoice_duration=60)
    paid = create(xendit, "order-2", invoice_duration=60)
    xendit.pay("order-2")

    clock.now = START + 59.999
    assert call(xendit, "GET", f"/v2/invoices/{invoice['id']}")[1]["status"] == "PENDING"
    assert xendit.invoices[invoice["id"]]["status"] == "PENDING"

    clock.now = START + 60
    expired = {**invoice, "status": "EXPIRED", "updated": invoice["expiry_date"]}
    assert xendit.invoices[invoice["id"]] == expired
    assert xendit.invoice_for("order-1") == expired
    assert call(xendit, "GET", f"/v2/invoices/{invoice['id']}") == (200, expired)
    assert call(xendit, "GET", "/v2/invoices?external_id=order-1") == (200, [expired])
    status, error = call(xendit, "POST", f"/invoices/{invoice['id']}/expire!")
    assert (status, error["error_code"]) == (404, "INVOICE_NOT_FOUND_ERROR")
    # A paid invoice does not expire.
    assert call(xendit, "GET", f"/v2/invoices/{paid['id']}")[1]["status"] == "PAID"


def test_the_11th_request_within_a_second_is_429_until_the_window_moves(
    xendit: FakeXendit, clock: SteppedClock
) -> None:
    for n in range(10):
        create(xendit, f"order-{n}")
    status, error = call(xendit, "POST", "/v2/invoices", invoice_body("order-10"))
    assert status == 429
    assert error["error_code"] == "RATE_LIMIT_EXCEEDED"
    assert error["message"]
    assert xendit.answered_429 == 1
    assert len(xendit.invoices) == 10  # a refused request creates nothing
    # The limit is per endpoint: the other endpoints still answer within the same second.
    assert call(xendit, "GET", "/v2/invoices?external_id=order-1")[0] == 200

    clock.now = START + 0.999  # the ten are still within the last second
    assert call(xendit, "POST", "/v2/invoices", invoice_body("order-10"))[0] == 429
    assert xendit.answered_429 == 2

    clock.now = START + 1.0  # now they are a second old: out of the window
    create(xendit, "order-10")
    assert len(xendit.invoices) == 11
    assert xendit.answered_429 == 2


def test_the_rate_window_slides_rather_than_resetting_on_each_whole_second(
    xendit: FakeXendit, clock: SteppedClock
) -> None:
    for at in (START + 0.5, START + 0.9):
        clock.now = at
        for _ in range(5):
            assert call(xendit, "GET", "/v2/invoices?external_id=order-1")[0] == 200

    clock.now = START + 1.2  # a new whole second, but ten arrivals in the last 1.0 s
    assert call(xendit, "GET", "/v2/invoices?external_id=order-1")[0] == 429

    clock.now = START + 1.5  # the five of START + 0.5 have left the window
    for _ in range(5):
        assert call(xendit, "GET", "/v2/invoices?external_id=order-1")[0] == 200
    assert call(xendit, "GET", "/v2/invoices?external_id=order-1")[0] == 429
    assert xendit.answered_429 == 2


def test_without_a_limit_nothing_is_refused(clock: SteppedClock) -> None:
    with FakeXendit(clock=clock, limit_per_second=None) as xendit:
        for n in range(25):
            create(xendit, f"order-{n}")
        assert (len(xendit.invoices), xendit.answered_429) == (25, 0)


def test_a_stalled_endpoint_waits_for_release_while_the_others_answer(xendit: FakeXendit) -> None:
    xendit.stalled.add("create")
    answers: list[tuple[int, Any]] = []
    client = threading.Thread(target=lambda: answers.append(call(xendit, "POST", "/v2/invoices", invoice_body())))
    client.start()

    assert xendit.stall_reached.wait(WAIT), "the create request never reached the stall"
    assert answers == []  # held: no answer, and nothing created yet
    assert xendit.invoices == {}
    assert call(xendit, "GET", "/v2/invoices?external_id=order-1") == (200, [])  # "list" is not stalled
    assert client.is_alive()

    xendit.release.set()
    client.join(WAIT)
    assert not client.is_alive()
    assert len(answers) == 1
    status, invoice = answers[0]
    assert status == 200
    assert xendit.invoices == {invoice["id"]: invoice}


def test_a_request_stalled_when_the_fake_stops_gets_no_answer_and_has_no_effect(clock: SteppedClock) -> None:
    xendit = FakeXendit(clock=clock).start()
    xendit.stalled.add("create")
    outcome: list[object] = []

    def client() -> None:
        try:
            outcome.append(call(xendit, "POST", "/v2/invoices", invoice_body()))
        except (ConnectionError, urllib.error.URLError) as error:
            outcome.append(error)

    thread = threading.Thread(target=client)
    thread.start()
    assert xendit.stall_reached.wait(WAIT), "the create request never reached the stall"
    assert outcome == []

    xendit.stop()
    thread.join(WAIT)
    assert not thread.is_alive()
    assert len(outcome) == 1
    assert isinstance(outcome[0], (ConnectionError, urllib.error.URLError)), outcome
    assert xendit.invoices == {}


def test_a_lost_answer_closes_the_connection_while_the_invoice_exists(xendit: FakeXendit) -> None:
    xendit.lose_answers = 1

    with pytest.raises(ConnectionError):  # http.client.RemoteDisconnected: closed with no response
        call(xendit, "POST", "/v2/invoices", invoice_body("order-1"))

    lost = xendit.invoice_for("order-1")
    assert lost is not None
    assert lost["status"] == "PENDING"
    assert xendit.lose_answers == 0
    assert call(xendit, "GET", f"/v2/invoices/{lost['id']}") == (200, lost)
    # The next one is answered: a second invoice of the same external_id.
    answered = create(xendit, "order-1")
    assert answered["id"] != lost["id"]
    assert [invoice["id"] for invoice in xendit.invoices.values()] == [lost["id"], answered["id"]]


def test_a_refused_create_does_not_use_up_a_lost_answer(xendit: FakeXendit) -> None:
    xendit.lose_answers = 1

    assert call(xendit, "POST", "/v2/invoices", invoice_body(amount=-1))[0] == 400
    assert xendit.lose_answers == 1
    with pytest.raises(ConnectionError):
        create(xendit)
    assert len(xendit.invoices) == 1


def test_pay_marks_the_newest_invoice_of_the_external_id_paid(xendit: FakeXendit, clock: SteppedClock) -> None:
    older = create(xendit)
    newer = create(xendit)
    clock.now = START + 42.5

    paid = xendit.pay("order-1")

    assert paid == {
        **newer,
        "status": "PAID",
        "paid_amount": 150000,
        "payment_method": "BANK_TRANSFER",
        "paid_at": "2027-01-15T08:00:42.500Z",
        "updated": "2027-01-15T08:00:42.500Z",
    }
    assert xendit.invoices[newer["id"]] == paid
    assert xendit.invoices[older["id"]]["status"] == "PENDING"
    assert call(xendit, "GET", f"/v2/invoices/{newer['id']}") == (200, paid)


def test_pay_takes_the_status_amount_currency_and_method_given(xendit: FakeXendit) -> None:
    create(xendit)

    paid = xendit.pay("order-1", amount=149000, currency="USD", payment_method="EWALLET", status="SETTLED")

    assert (paid["status"], paid["paid_amount"], paid["amount"]) == ("SETTLED", 149000, 150000)
    assert (paid["currency"], paid["payment_method"]) == ("USD", "EWALLET")
    assert INSTANT.match(paid["paid_at"])
    with pytest.raises(KeyError):
        xendit.pay("order-404")
    with pytest.raises(ValueError):
        xendit.pay("order-1", status="EXPIRED")


def test_callback_carries_the_token_a_unique_webhook_id_and_the_invoice_fields(xendit: FakeXendit) -> None:
    create(xendit)
    paid = xendit.pay("order-1")

    headers, body = xendit.callback(paid)
    again, _ = xendit.callback(paid)

    assert headers["x-callback-token"] == TEST_XENDIT_CALLBACK_TOKEN
    assert headers["Content-Type"] == "application/json"
    assert set(headers) == {"x-callback-token", "webhook-id", "Content-Type"}
    assert headers["webhook-id"] and headers["webhook-id"] != again["webhook-id"]
    assert json.loads(body) == {field: paid[field] for field in CALLBACK_FIELDS}
    assert set(CALLBACK_FIELDS) == {
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
    }


def test_callback_overrides(clock: SteppedClock) -> None:
    with FakeXendit(clock=clock, callback_token="xendit-callback-token-of-another-account") as xendit:
        create(xendit)
        paid = xendit.pay("order-1")

        headers, body = xendit.callback(paid)
        assert headers["x-callback-token"] == "xendit-callback-token-of-another-account"

        headers, body = xendit.callback(paid, webhook_id="wh-1", token="forged", paid_amount=1, status="SETTLED")
        assert (headers["webhook-id"], headers["x-callback-token"]) == ("wh-1", "forged")
        assert json.loads(body) == {
            **{field: paid[field] for field in CALLBACK_FIELDS},
            "paid_amount": 1,
            "status": "SETTLED",
        }


def test_the_web_page_names_the_invoice(xendit: FakeXendit) -> None:
    invoice = create(xendit)

    with urllib.request.urlopen(invoice["invoice_url"], timeout=WAIT) as page:
        assert page.status == 200
        assert invoice["id"] in page.read().decode()
