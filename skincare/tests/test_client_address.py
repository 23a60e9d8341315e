"""Client addresses behind reverse proxies (TRUSTED_PROXIES) for the admin login throttle and /metrics, the
throttle's username and IPv6 rules, and /metrics in production (docs/reliability.md)."""

import uuid

import pytest
from django.contrib.auth import get_user_model
from django.test import Client, RequestFactory, override_settings

from skincare import checks, clientaddr
from skincare.clientaddr import client_address, throttle_key
from skincare.models import AdminLoginFailure

PROXY = "127.0.0.1"  # a reverse proxy on the same host: every request's peer is loopback


def login(client: Client, username: str, password: str | None = None) -> int:
    data = {"username": username, "password": password or "a-wrong-guess", "next": "/admin/"}
    return client.post("/admin/login/", data).status_code


def someone() -> str:
    """A fresh username, so only the per-address counter can block."""
    return f"guess-{uuid.uuid4().hex[:8]}"


def address(remote: str, forwarded: str | None = None) -> str | None:
    meta = {"REMOTE_ADDR": remote} | ({"HTTP_X_FORWARDED_FOR": forwarded} if forwarded is not None else {})
    found = client_address(RequestFactory().get("/", **meta))
    return None if found is None else str(found)


def test_x_forwarded_for_is_read_from_the_right_and_only_behind_a_trusted_peer(settings) -> None:
    settings.TRUSTED_PROXIES = ["127.0.0.1/32", "10.0.0.0/8"]
    assert address("203.0.113.9", "198.51.100.1") == "203.0.113.9"  # untrusted peer: the header is ignored
    assert address(PROXY, "198.51.100.1") == "198.51.100.1"
    assert address(PROXY, "6.6.6.6, 198.51.100.1") == "198.51.100.1"  # the client wrote 6.6.6.6 itself
    assert address(PROXY, "6.6.6.6, 198.51.100.1, 10.1.2.3") == "198.51.100.1"  # a second trusted hop is skipped
    assert address(PROXY, "198.51.100.1, not-an-address") == PROXY  # unreadable where the client should be
    assert address(PROXY, "") == PROXY
    assert address("::ffff:127.0.0.1", "198.51.100.1") == "198.51.100.1"  # an IPv4-mapped peer is that IPv4
    assert address(PROXY, "2001:db8::7") == "2001:db8::7"


def test_ipv6_addresses_are_keyed_by_their_64() -> None:
    keys = {
        throttle_key(client_address(RequestFactory().get("/", REMOTE_ADDR=a)))
        for a in ("2001:db8:1:2::a", "2001:db8:1:2:ffff::1")
    }
    assert keys == {"2001:db8:1:2::"}
    assert throttle_key(client_address(RequestFactory().get("/", REMOTE_ADDR="2001:db8:1:3::a"))) == "2001:db8:1:3::"
    assert throttle_key(client_address(RequestFactory().get("/", REMOTE_ADDR="198.51.100.4"))) == "198.51.100.4"


@pytest.mark.django_db
@pytest.mark.parametrize("trusted", [["127.0.0.1/32"], ["0.0.0.0/0"]], ids=["proxy-only", "control-every-peer"])
def test_a_forged_x_forwarded_for_from_an_untrusted_peer_is_ignored(settings, trusted) -> None:  # type: ignore[no-untyped-def]
    settings.TRUSTED_PROXIES, settings.METRICS_TOKEN, settings.ADMIN_LOGIN_MAX_FAILURES_PER_ADDRESS = trusted, "", 3
    forger = Client(REMOTE_ADDR="203.0.113.9", HTTP_X_FORWARDED_FOR="127.0.0.1")
    victim = "198.51.100.50"

    metrics = forger.get("/metrics").status_code
    for _ in range(3):  # failures pinned on someone else's address, if the header were believed
        login(Client(REMOTE_ADDR="203.0.113.9", HTTP_X_FORWARDED_FOR=victim), someone())

    if trusted == ["127.0.0.1/32"]:
        assert metrics == 403
        assert set(AdminLoginFailure.objects.values_list("client_ip", flat=True)) == {"203.0.113.9"}
    else:  # control: trusting every peer believes anyone's header
        assert metrics == 200
        assert set(AdminLoginFailure.objects.values_list("client_ip", flat=True)) == {victim}


@pytest.mark.django_db
@pytest.mark.parametrize("trusted", [["127.0.0.1/32"], []], ids=["trusted-proxy", "control-no-trusted-proxy"])
def test_behind_the_proxy_one_clients_failures_do_not_lock_out_another(settings, trusted) -> None:  # type: ignore[no-untyped-def]
    settings.TRUSTED_PROXIES, settings.ADMIN_LOGIN_MAX_FAILURES_PER_ADDRESS = trusted, 5
    attacker = Client(REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR="203.0.113.66")
    admin = Client(REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR="198.51.100.77")

    assert [login(attacker, someone()) for _ in range(5)] == [200] * 5
    assert login(attacker, someone()) == 429

    if trusted:
        assert login(admin, someone()) == 200
    else:  # control: without TRUSTED_PROXIES every client is the proxy's 127.0.0.1, and one locks out all
        assert login(admin, someone()) == 429


@pytest.mark.django_db
def test_a_username_with_spaces_counts_for_the_account(settings) -> None:  # type: ignore[no-untyped-def]
    settings.ADMIN_LOGIN_MAX_FAILURES = 3
    get_user_model().objects.create_user("demo-ops", password="right-password-for-tests", is_staff=True)
    guesser = Client(REMOTE_ADDR="198.51.100.1")

    for name in ["demo-ops ", " demo-ops", "demo-ops\t"]:
        assert login(guesser, name) == 200

    assert list(AdminLoginFailure.objects.values_list("username", flat=True)) == ["demo-ops"] * 3
    assert login(guesser, "demo-ops ", "right-password-for-tests") == 429  # what the form would log in as demo-ops
    assert login(guesser, "demo-ops", "right-password-for-tests") == 429


@pytest.mark.django_db
def test_two_ipv6_addresses_in_one_64_share_a_counter(settings) -> None:  # type: ignore[no-untyped-def]
    settings.ADMIN_LOGIN_MAX_FAILURES_PER_ADDRESS = 3
    for host in ("::a", "::b", "::c"):
        assert login(Client(REMOTE_ADDR=f"2001:db8:1:2{host}"), someone()) == 200

    assert login(Client(REMOTE_ADDR="2001:db8:1:2:ffff:ffff:ffff:1"), someone()) == 429  # same /64
    assert login(Client(REMOTE_ADDR="2001:db8:1:3::a"), someone()) == 200  # the next /64 is someone else


@pytest.mark.django_db
def test_metrics_in_production_needs_the_token_even_from_loopback(settings) -> None:  # type: ignore[no-untyped-def]
    settings.PRODUCTION, settings.METRICS_TOKEN = True, ""
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 403
    assert [m.id for m in checks.client_address_settings()] == ["skincare.I010"]

    settings.METRICS_TOKEN = "scrape-token-for-tests"
    assert checks.client_address_settings() == []
    answer = Client(REMOTE_ADDR="127.0.0.1").get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-token-for-tests")
    assert answer.status_code == 200


def test_trusted_proxies_must_be_networks(settings) -> None:  # type: ignore[no-untyped-def]
    settings.PRODUCTION = False
    settings.TRUSTED_PROXIES = ["10.0.0.0/8", "proxy.internal"]
    assert [m.id for m in checks.client_address_settings()] == ["skincare.E010"]
    settings.TRUSTED_PROXIES = ["10.0.0.0/8", "::1", "fd00::/8"]
    assert checks.client_address_settings() == []


# ---------------------------------------------------------------------------------------------------------------
# Addresses that cannot be forged or lost


def test_when_every_hop_is_trusted_the_client_written_entry_is_never_taken(settings) -> None:  # type: ignore[no-untyped-def]
    settings.TRUSTED_PROXIES = ["127.0.0.1/32", "10.0.0.0/8"]
    # A client inside the trusted range (10.0.0.5) writes a victim's address; the proxy appends 10.0.0.5.
    assert address(PROXY, "10.9.9.9, 10.0.0.5") == "10.0.0.5"
    assert address(PROXY, "127.0.0.1") == "127.0.0.1"
    # The right-most untrusted hop is still the client when there is one.
    assert address(PROXY, "10.9.9.9, 198.51.100.1, 10.0.0.5") == "198.51.100.1"


@pytest.mark.django_db
def test_a_client_inside_the_trusted_range_cannot_pin_failures_on_a_victim(settings) -> None:  # type: ignore[no-untyped-def]
    settings.TRUSTED_PROXIES = ["127.0.0.1/32", "10.0.0.0/8"]
    settings.ADMIN_LOGIN_MAX_FAILURES_PER_ADDRESS = 3
    victim = "10.20.30.40"
    inside = Client(REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR=f"{victim}, 10.0.0.5")
    for _ in range(3):
        login(inside, someone())
    assert set(AdminLoginFailure.objects.values_list("client_ip", flat=True)) == {"10.0.0.5"}
    assert login(Client(REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR=victim), someone()) == 200


def test_addresses_with_a_port_are_read() -> None:
    assert address("198.51.100.1", None) == "198.51.100.1"
    for forwarded, expected in [
        ("198.51.100.1:51234", "198.51.100.1"),
        ("[2001:db8::1]:443", "2001:db8::1"),
        ("[2001:db8::1]", "2001:db8::1"),
        ("6.6.6.6, 198.51.100.2:80", "198.51.100.2"),
    ]:
        with override_settings(TRUSTED_PROXIES=["127.0.0.1/32"]):
            assert address(PROXY, forwarded) == expected, forwarded


@pytest.mark.django_db
def test_two_clients_with_ports_are_two_addresses_not_the_proxy(settings) -> None:  # type: ignore[no-untyped-def]
    settings.TRUSTED_PROXIES, settings.ADMIN_LOGIN_MAX_FAILURES_PER_ADDRESS = ["127.0.0.1/32"], 3
    attacker = Client(REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR="203.0.113.66:40000")
    for _ in range(3):
        login(attacker, someone())
    assert login(attacker, someone()) == 429
    assert login(Client(REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR="198.51.100.77:40001"), someone()) == 200


def test_an_empty_peer_address_is_unknown_not_loopback(settings) -> None:  # type: ignore[no-untyped-def]
    settings.TRUSTED_PROXIES = ["127.0.0.1/32"]
    assert address("", "198.51.100.1") is None
    settings.PRODUCTION, settings.METRICS_TOKEN = False, ""
    assert Client(REMOTE_ADDR="").get("/metrics").status_code == 403


@pytest.mark.parametrize(
    ("ranges", "warned"),
    [
        (["0.0.0.0/0"], ["skincare.W010"]),
        (["::/0"], ["skincare.W010"]),
        (["10.0.0.0/7"], ["skincare.W010"]),
        (["8000::/1"], ["skincare.W010"]),
        (["11.0.0.0/8"], ["skincare.W010"]),
        (["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7", "127.0.0.1"], []),
    ],
)
def test_start_up_warns_on_ranges_wider_than_a_private_network(settings, ranges, warned) -> None:  # type: ignore[no-untyped-def]
    settings.PRODUCTION, settings.TRUSTED_PROXIES = False, ranges
    assert [m.id for m in checks.client_address_settings()] == warned


@pytest.mark.parametrize(
    "ranges",
    [
        ["8000::/1"],  # half the IPv6 internet
        ["2000::/3"],  # all of global unicast
        ["fc00::/6"],  # wider than unique local
        ["2001:db8:1::/48"],  # narrow, but public
        ["11.0.0.0/8"],  # as wide as 10.0.0.0/8, but public
        ["203.0.113.0/24"],
        ["10.0.0.0/7"],
        ["0.0.0.0/0"],
    ],
)
def test_production_refuses_trusted_ranges_that_are_not_private_or_loopback(settings, ranges) -> None:  # type: ignore[no-untyped-def]
    settings.PRODUCTION, settings.TRUSTED_PROXIES = True, ["10.0.3.0/24", *ranges]
    refused = checks.production_trusted_proxies()
    assert [(m.id, ranges[0] in m.msg) for m in refused] == [("skincare.E013", True)]


def test_control_production_accepts_private_and_loopback_proxies(settings) -> None:  # type: ignore[no-untyped-def]
    settings.PRODUCTION = True
    settings.TRUSTED_PROXIES = ["10.0.3.0/24", "172.16.0.0/12", "192.168.0.0/16", "127.0.0.1", "::1", "fd12:3456::/48"]
    assert checks.production_trusted_proxies() == []
    assert [m.id for m in checks.client_address_settings() if m.id != "skincare.I010"] == []


@pytest.mark.django_db
def test_an_unreadable_hop_is_the_hop_that_forwarded_it_not_the_proxy(settings) -> None:  # type: ignore[no-untyped-def]
    """A client inside the trusted range sends garbage as its X-Forwarded-For: it is the last hop that could be read
    (itself), never the proxy's own loopback address, which would open /metrics to it."""
    settings.TRUSTED_PROXIES = ["127.0.0.1/32", "10.0.0.0/8"]
    settings.PRODUCTION, settings.METRICS_TOKEN = False, ""
    assert address(PROXY, "garbage, 10.0.0.5") == "10.0.0.5"
    assert address(PROXY, "198.51.100.1, garbage, 10.0.0.5") == "10.0.0.5"
    assert Client(REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR="garbage, 10.0.0.5").get("/metrics").status_code == 403
    # Control: the proxy's own request (no header) is loopback, and /metrics answers it in development.
    assert Client(REMOTE_ADDR=PROXY).get("/metrics").status_code == 200


@pytest.fixture
def forwarding_report():  # type: ignore[no-untyped-def]
    logged = clientaddr._ForwardingReport.logged
    clientaddr._ForwardingReport.logged = False
    yield
    clientaddr._ForwardingReport.logged = logged


def untrusted_forwarding_warnings(caplog) -> list[str]:  # type: ignore[no-untyped-def]
    return [r.getMessage() for r in caplog.records if r.name == "skincare.clientaddr" and r.levelname == "WARNING"]


@pytest.mark.django_db
def test_requests_through_an_undeclared_proxy_log_one_warning_per_process(settings, caplog, forwarding_report) -> None:  # type: ignore[no-untyped-def]
    settings.TRUSTED_PROXIES = []
    caplog.set_level("WARNING", logger="skincare.clientaddr")
    Client(REMOTE_ADDR=PROXY).get("/admin/login/")  # no header: nothing to say
    assert untrusted_forwarding_warnings(caplog) == []
    for forwarded in ("198.51.100.1", "198.51.100.2"):
        Client(REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR=forwarded).get("/admin/login/")
        login(Client(REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR=forwarded), someone())
    warnings = untrusted_forwarding_warnings(caplog)
    assert len(warnings) == 1, warnings
    assert "TRUSTED_PROXIES is empty" in warnings[0] and PROXY in warnings[0]


@pytest.mark.django_db
def test_control_a_declared_proxy_is_not_warned_about(settings, caplog, forwarding_report) -> None:  # type: ignore[no-untyped-def]
    settings.TRUSTED_PROXIES = ["127.0.0.1/32"]
    caplog.set_level("WARNING", logger="skincare.clientaddr")
    Client(REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR="198.51.100.1").get("/admin/login/")
    assert untrusted_forwarding_warnings(caplog) == []
