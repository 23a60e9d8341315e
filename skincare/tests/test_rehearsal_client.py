"""The rehearsals' client (devtools/rehearsal_client.py, under devtools/shop_load.py and make failover) against a tiny
HTTP server on a real socket that answers as scripted: a whole answer, a body cut off mid-way, a 500, no answer.
Every request a shopper starts ends counted as an answer, a time-out or an error; a 5xx and a cut body are failures;
a shopper thread that dies is lost and fails the run; fewer requests or shoppers than stated fail it. The control
runs the client as it was (it recorded a request only on an answer or an OSError) against the same server: it says
zero failed. Also the deploy rehearsal's own rules: production's front, enough shoppers, the release seen."""

import json
import threading
import time
import urllib.error
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from deploy.haproxy import render
from devtools import deploy_rehearsal
from devtools.failover_proof import Call
from devtools.processes import http_call
from devtools.rehearsal_client import Recorder, Tally, failed, tally, verdict
from devtools.shop_load import ShopLoad

CONFLICT = json.dumps({"code": "stock_conflict"}).encode()


class Script:
    """What the server answers, request after request (``then`` once the list is used up); ``seen`` is set once it
    has answered ``wait_for`` requests."""

    def __init__(self, steps: list[str], then: str = "conflict", wait_for: int = 0) -> None:
        self.steps, self.then, self.wait_for = steps, then, wait_for or len(steps) + 2
        self.lock = threading.Lock()
        self.answered = 0
        self.seen = threading.Event()
        self.release = threading.Event()  # ends a "hang" at teardown

    def next(self) -> str:
        with self.lock:
            step = self.steps[self.answered] if self.answered < len(self.steps) else self.then
            self.answered += 1
            if self.answered >= self.wait_for:
                self.seen.set()
        return step


def handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def answer(self, status: int, body: bytes, length: int | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body) if length is None else length))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
            self.close_connection = True

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            step = script.next()
            if step == "conflict":
                self.answer(409, CONFLICT)
            elif step == "cut":  # 201 announced with 200 bytes of body, 20 sent, the connection closed
                self.answer(201, b'{"order_id": 1, "to', length=200)
            elif step == "500":
                self.answer(500, json.dumps({"code": "internal"}).encode())
            elif step == "created-not-an-object":  # a 201 whose body the shopper cannot use
                self.answer(201, b"[]")
            elif step == "hang":
                script.release.wait(30)

    return Handler


@pytest.fixture
def serve() -> Iterator:
    servers: list[tuple[ThreadingHTTPServer, Script]] = []

    def start(script: Script) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler(script))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append((server, script))
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server, script in servers:
        script.release.set()
        server.shutdown()
        server.server_close()


def shoppers(base: str, n: int = 1, recorder: Recorder | None = None) -> ShopLoad:
    return ShopLoad(
        base,
        [f"token-{i}" for i in range(n)],
        [f"shopper-{i}" for i in range(n)],
        101,
        [102, 103],
        "t",
        recorder=recorder or Recorder(timeout=0.5),
    )


def test_every_request_ends_counted_and_a_cut_body_a_500_and_a_time_out_are_failures(serve):
    script = Script(["conflict", "cut", "500", "hang", "conflict"])
    load = shoppers(serve(script)).start(1)
    assert script.seen.wait(30), "the shopper stopped sending"
    load.stop()
    counted = tally(load.recorder)
    assert counted.lost == ()
    assert counted.uncounted == 0 and counted.requests == len(load.calls) >= script.wait_for
    assert (counted.errors, counted.server_errors, counted.timeouts) == (1, 1, 1)
    [cut] = [c for c in load.calls if c.outcome == "error"]
    assert "IncompleteRead" in cut.error and cut.status == 0
    assert {c.status for c in failed(load.calls)} == {0, 500}
    problems = verdict(counted, min_requests=1, min_shoppers=1)
    assert problems == ["3 requests failed: 1 answered 5xx, 1 timed out, 1 errors"]


def test_a_5xx_answer_is_a_failed_request(serve):
    script = Script([], then="500", wait_for=3)
    load = shoppers(serve(script)).start(1)
    assert script.seen.wait(30)
    load.stop()
    counted = tally(load.recorder)
    assert counted.server_errors == counted.answers >= 3 and counted.failed == counted.requests
    assert all(c.status == 500 for c in failed(load.calls)) and len(failed(load.calls)) == counted.requests
    assert verdict(counted, min_requests=1, min_shoppers=1)


def test_control_answers_that_are_not_5xx_pass_the_same_verdict(serve):
    script = Script([], then="conflict", wait_for=3)
    load = shoppers(serve(script)).start(1)
    assert script.seen.wait(30)
    load.stop()
    counted = tally(load.recorder)
    assert counted.failed == 0 and failed(load.calls) == []
    assert verdict(counted, min_requests=3, min_shoppers=1) == []


class ClientAsItWas(Recorder):
    """The control: the request recorded only when it got an answer or an OSError, the thread unguarded."""

    def send(self, call: Call, base: str, path: str, body: bytes | None, headers: dict[str, str]) -> Call:
        call.started = time.monotonic()
        try:
            call.status, payload, _answer = http_call(base, path, body=body, headers=headers, timeout=self.timeout)
        except (OSError, urllib.error.URLError) as error:
            call.status, payload, call.error = 0, b"", repr(error)
        call.ended = time.monotonic()
        try:
            call.body = json.loads(payload) if payload else {}
        except ValueError:
            call.body = {"raw": payload[:200].decode(errors="replace")}
        with self.lock:
            self.calls.append(call)
        return call

    def shopper_thread(self, shopper, i):  # type: ignore[no-untyped-def]
        return threading.Thread(target=shopper, args=(i,), daemon=True)


def test_control_the_client_as_it_was_says_zero_failed_after_a_cut_body_and_a_500(serve, monkeypatch):
    died: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda hook: died.append(hook.exc_value))
    script = Script(["conflict", "conflict", "cut", "500"])
    load = shoppers(serve(script), recorder=ClientAsItWas(timeout=5)).start(1)
    load.threads[0].join(30)  # the cut body ended the thread: nothing more is sent
    assert not load.threads[0].is_alive() and type(died[0]).__name__ == "IncompleteRead"
    assert script.answered == 3 and len(load.calls) == 2
    assert [c for c in load.calls if c.status == 0 or c.status >= 500] == []  # its count: zero failed


def test_a_shopper_thread_that_dies_is_lost_and_fails_the_run(serve):
    script = Script([], then="created-not-an-object")
    load = shoppers(serve(script)).start(1)
    load.threads[0].join(30)  # pay or cancel read an order out of "[]"
    assert not load.threads[0].is_alive()
    load.stop()
    counted = tally(load.recorder)
    assert len(counted.lost) == 1 and "shopper 0 died" in counted.lost[0]
    assert counted.failed == 0 and counted.uncounted == 0
    assert verdict(counted, min_requests=1, min_shoppers=1) == [f"lost shopper thread: {counted.lost[0]}"]


def test_fewer_requests_or_shoppers_than_stated_fail_the_run():
    counted = Tally(requests=99, answers=99, timeouts=0, errors=0, server_errors=0, shoppers=3, lost=())
    assert verdict(counted, min_requests=100, min_shoppers=4) == [
        "99 requests, fewer than the rehearsal's minimum of 100",
        "3 shoppers sent requests, fewer than the rehearsal's minimum of 4",
    ]
    assert verdict(counted, min_requests=99, min_shoppers=3) == []  # control: at the minimum


def test_the_deploy_rehearsal_runs_productions_front_with_every_worker_busy():
    lb = deploy_rehearsal.front({"web0": 9000, "web1": 9001}, workers=3)
    assert lb.queue_timeout_ms == render.QUEUE_TIMEOUT_MS and lb.maxconn == 3 * 4  # a request per worker thread
    args = deploy_rehearsal.parse_args([])
    slots = deploy_rehearsal.INSTANCES * args.workers * 4  # WEB_THREADS' default
    assert args.shoppers == deploy_rehearsal.min_shoppers(args.workers) >= 2 * slots
    with pytest.raises(SystemExit):
        deploy_rehearsal.parse_args(["--queue-timeout-ms", "10000"])


def answer(release: str, started: float) -> Call:
    return Call("checkout", 201, {}, started, started + 0.1, customer="c", outcome="answer", release=release)


OLD, NEW = deploy_rehearsal.OLD_RELEASE, deploy_rehearsal.NEW_RELEASE


def test_the_deploy_rehearsal_sees_the_new_release_in_the_answers():
    calls = [answer(OLD, 1), answer(OLD, 10), answer(NEW, 12), answer(NEW, 30)]
    assert deploy_rehearsal.release_problems(calls, rolled_from=5, rolled_until=20) == []
    same_code = [answer(OLD, 1), answer(OLD, 30)]
    assert deploy_rehearsal.release_problems(same_code, rolled_from=5, rolled_until=20) == [
        f"1 answers after the release came from {OLD!r}, not {NEW}"
    ]
    unnamed = [answer(OLD, 1), answer("", 30)]
    problems = deploy_rehearsal.release_problems(unnamed, rolled_from=5, rolled_until=20)
    assert problems[0] == "1 answers named no release of the run, e.g. ''"
    assert deploy_rehearsal.release_problems([answer(OLD, 1)], rolled_from=5, rolled_until=20) == [
        "answers before the release: 1, after it: 0 (both needed)"
    ]
