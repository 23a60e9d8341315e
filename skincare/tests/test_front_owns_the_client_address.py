"""The front owns the client's address: through a real HAProxy running production's configuration
(``deploy/haproxy/haproxy.cfg.template``, rendered by deploy/haproxy/render.py) in front of real gunicorn, a client's own
``X-Forwarded-For`` (and ``X-Forwarded-Proto``, ``Forwarded``, ...) never reaches the application; the front writes
the address the connection came from. So a client cannot choose the address the admin login throttle counts it
under. The controls run the front's old configuration, which passed the client's headers on (no ``del-header``, no
``option forwardfor``), and one that appends without removing: there the forgery works.

The client connects from 127.0.0.2 (any 127/8 address is this host), so it is not the front (127.0.0.1), which is
what ``TRUSTED_PROXIES`` names."""

import http.client
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlencode

import pytest
from django.contrib.auth import get_user_model

from devtools.haproxy import HAProxy
from devtools.processes import Gunicorn, free_port
from skincare.models import AdminLoginFailure
from skincare.tests.test_metrics import _url as database_url_for_children

pytestmark = [pytest.mark.haproxy, pytest.mark.django_db(transaction=True)]

CLIENT = "127.0.0.2"  # the client's own address, as the front sees it
LIMIT = 3
FORGED = [f"198.51.100.{i}" for i in range(1, 2 * LIMIT + 1)]  # a fresh address in every request
CLIENT_HEADERS = {
    "X-Forwarded-For": "198.51.100.7",
    "X-Forwarded-Proto": "https",
    "X-Forwarded-Ssl": "on",
    "X-Forwarded-Protocol": "ssl",
    "X-Forwarded-Host": "evil.example",
    "X-Real-IP": "198.51.100.7",
    "Forwarded": "for=198.51.100.7;proto=https",
}


def without_lines(*fragments: str) -> Callable[[str], str]:
    def edit(config: str) -> str:
        return "".join(line for line in config.splitlines(keepends=True) if not any(f in line for f in fragments))

    return edit


# The front as it shipped before: it passed every client header on and wrote none of its own.
OLD_FRONT = without_lines("http-request del-header", "option forwardfor", "http-request set-header")
# A front that appends the connection's address but keeps what the client wrote in front of it.
APPENDING_FRONT = without_lines("http-request del-header X-Forwarded-For")


class EditedFront(HAProxy):
    """A control: production's configuration with ``edit`` applied."""

    def __init__(self, edit: Callable[[str], str], *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.edit = edit

    def render(self) -> str:
        config = self.edit(super().render())
        assert config != super().render()
        return config


def front(backend_port: int, edit: Callable[[str], str] | None = None) -> HAProxy:
    if edit is None:
        return HAProxy({"web0": backend_port}, maxconn=2)
    return EditedFront(edit, {"web0": backend_port}, maxconn=2)


def connect(lb: HAProxy) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", lb.port, timeout=30, source_address=(CLIENT, 0))


# ---------------------------------------------------------------------------------------------------------------
# What reaches the application: an echo server behind the front


class Echo(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        # A header sent on several lines is one list, as gunicorn hands it to Django ("a, b").
        names = {name.lower() for name in self.headers}
        body = json.dumps({name: ", ".join(self.headers.get_all(name) or []) for name in names}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def echo_server() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Echo)
    thread = threading.Thread(target=server.serve_forever, name="echo", daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def headers_the_application_sees(edit: Callable[[str], str] | None) -> dict[str, str]:
    with echo_server() as port, front(port, edit) as lb:
        conn = connect(lb)
        conn.request("GET", "/echo", headers=CLIENT_HEADERS)
        response = conn.getresponse()
        assert response.status == 200
        return json.loads(response.read())


def test_the_application_sees_the_fronts_headers_never_the_clients() -> None:
    seen = headers_the_application_sees(None)
    assert (seen.get("x-forwarded-for"), seen.get("x-forwarded-proto")) == (CLIENT, "http")
    assert not {"x-forwarded-ssl", "x-forwarded-protocol", "x-forwarded-host", "x-real-ip", "forwarded"} & set(seen)


@pytest.mark.parametrize("edit", [OLD_FRONT, APPENDING_FRONT], ids=["old-front", "appending-front"])
def test_control_a_front_that_keeps_the_clients_header_passes_it_on(edit: Callable[[str], str]) -> None:
    seen = headers_the_application_sees(edit)
    assert seen.get("x-forwarded-for") != CLIENT
    assert seen["x-forwarded-for"].startswith(CLIENT_HEADERS["X-Forwarded-For"])


# ---------------------------------------------------------------------------------------------------------------
# The admin login throttle behind the front


@pytest.fixture
def operator(db: None) -> None:
    get_user_model().objects.create_user("ops-lead", password="right-password-for-tests", is_staff=True)


@contextmanager
def shop(trusted_proxies: str) -> Iterator[Gunicorn]:
    env = {"ACCESS_LOG": "false", "TRUSTED_PROXIES": trusted_proxies, "ADMIN_LOGIN_MAX_FAILURES": LIMIT}
    with Gunicorn(database_url_for_children(), workers=2, conn_max_age=0, extra_env=env) as web:
        yield web


def wrong_password(lb: HAProxy, forwarded_for: str) -> int:
    """One wrong password for ops-lead through the front, as a browser sends it (the login page's CSRF cookie and
    token first), with the client's own ``X-Forwarded-For`` on both requests; the POST's status."""
    conn = connect(lb)
    conn.request("GET", "/admin/login/", headers={"X-Forwarded-For": forwarded_for})
    page = conn.getresponse()
    page.read()
    cookies: SimpleCookie = SimpleCookie()
    for header in page.headers.get_all("Set-Cookie") or []:
        cookies.load(header)
    token = cookies["csrftoken"].value
    form = urlencode({"username": "ops-lead", "password": "a-wrong-guess", "csrfmiddlewaretoken": token})
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "Cookie": f"csrftoken={token}",
        "X-Forwarded-For": forwarded_for,
    }
    conn.request("POST", "/admin/login/", body=form, headers=headers)
    answer = conn.getresponse()
    answer.read()
    conn.close()
    return answer.status


def guesses_with_forged_addresses(trusted_proxies: str, edit: Callable[[str], str] | None) -> list[int]:
    with shop(trusted_proxies) as web, front(web.port, edit) as lb:
        return [wrong_password(lb, forged) for forged in FORGED]


def counted_under() -> set[str | None]:
    return set(AdminLoginFailure.objects.values_list("client_ip", flat=True))


def test_a_forged_x_forwarded_for_has_no_effect_on_the_login_throttle(operator) -> None:  # type: ignore[no-untyped-def]
    statuses = guesses_with_forged_addresses("127.0.0.1/32", None)  # the front is the trusted proxy, as documented
    assert statuses == [200] * LIMIT + [429] * LIMIT  # a fresh header each time changes nothing
    assert counted_under() == {CLIENT}  # counted under the client's own address


def test_control_the_old_front_lets_a_client_choose_its_address(operator) -> None:  # type: ignore[no-untyped-def]
    statuses = guesses_with_forged_addresses("127.0.0.1/32", OLD_FRONT)
    assert statuses == [200] * len(FORGED)  # never refused
    assert counted_under() == set(FORGED)  # each guess counted under the address the client wrote


def test_a_client_inside_the_trusted_range_cannot_forge_its_address_through_the_front(operator) -> None:  # type: ignore[no-untyped-def]
    """TRUSTED_PROXIES is the front's subnet, and the client is in it (an office host on the proxies' network):
    the header holds only what the front wrote, so the client is the front's entry, never one it wrote."""
    statuses = guesses_with_forged_addresses("127.0.0.0/8", None)
    assert statuses == [200] * LIMIT + [429] * LIMIT
    assert counted_under() == {CLIENT}


def test_control_a_front_that_only_appends_lets_a_trusted_client_choose_its_address(operator) -> None:  # type: ignore[no-untyped-def]
    statuses = guesses_with_forged_addresses("127.0.0.0/8", APPENDING_FRONT)
    assert statuses == [200] * len(FORGED)
    assert counted_under() == set(FORGED)
