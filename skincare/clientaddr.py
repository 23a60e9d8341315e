"""The client's address, behind trusted reverse proxies (``TRUSTED_PROXIES``), for the admin login throttle and
``/metrics``' loopback rule.

Without trusted proxies the address is the TCP peer (``REMOTE_ADDR``) and ``X-Forwarded-For`` is ignored: any
client can write that header. When the peer is a trusted proxy, the header's entries are read from the right (each
proxy appends the address it received the request from) and the first one that is not itself a trusted proxy is
the client: django-ipware's right-most-untrusted rule. Entries further left were written by the client and are
never believed. Two cases where a naive reading would believe them:

- every entry is a trusted address (a client inside the proxies' own network, or a range that is too wide): the
  client is then the **right-most** entry, the address the peer itself received the request from. The left-most
  one may be what that client wrote (any victim's address), so it is never taken;
- an unreadable entry where the client should be: the last hop that could be read.

Entries may carry a port, as some proxies write them: ``203.0.113.9:51234`` and ``[2001:db8::1]:443`` are read as
their address (a port never makes every client look like the proxy). A request without a readable peer address (a
unix socket) has no address: the login throttle counts it in an explicit "unknown" bucket with its own limit, and
``/metrics`` does not treat it as loopback.

A request with ``X-Forwarded-For`` while ``TRUSTED_PROXIES`` is empty logs one warning per process (a proxy nobody
declared makes every client it forwards one address); production refuses a trusted range that is not private or
loopback (``skincare.E013``).
"""

import functools
import ipaddress
import logging
from collections.abc import Iterable

from django.conf import settings
from django.http import HttpRequest

logger = logging.getLogger(__name__)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(values: Iterable[str]) -> tuple[Network, ...]:
    """CIDRs (or bare addresses) → networks; raises ValueError naming the first one that is not."""
    networks = []
    for value in values:
        value = value.strip()
        if not value:
            continue
        try:
            networks.append(ipaddress.ip_network(value, strict=False))
        except ValueError:
            raise ValueError(f"not an IP network: {value!r}") from None
    return tuple(networks)


@functools.lru_cache(maxsize=4)
def _trusted(values: tuple[str, ...]) -> tuple[Network, ...]:
    return parse_networks(values)


def trusted_proxies() -> tuple[Network, ...]:
    """The parsed ``TRUSTED_PROXIES`` setting (validated at start-up by ``skincare.checks``)."""
    return _trusted(tuple(settings.TRUSTED_PROXIES))


def parse_address(value: str | None) -> Address | None:
    """An address, also written as ``ip:port``, ``[v6]`` or ``[v6]:port``, an IPv4-mapped IPv6 address
    (``::ffff:a.b.c.d``) as its IPv4 address; None when unreadable. The one reading of an address text: the peer's,
    each ``X-Forwarded-For`` entry's, and ``admin_login_unlock --address``'s."""
    if not value:
        return None
    value = value.strip()
    if value.startswith("["):  # [2001:db8::1] or [2001:db8::1]:443
        value = value[1 : value.find("]")] if "]" in value else ""
    elif value.count(":") == 1:  # 203.0.113.9:51234 (a bare IPv6 address has several colons)
        value = value.split(":", 1)[0]
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _is_trusted(address: Address, networks: tuple[Network, ...]) -> bool:
    return any(address.version == network.version and address in network for network in networks)


def client_address(request: HttpRequest) -> Address | None:
    """The client's address: the peer, or behind trusted proxies the right-most untrusted ``X-Forwarded-For`` entry."""
    peer = parse_address(request.META.get("REMOTE_ADDR"))
    networks = trusted_proxies()
    if peer is None or not networks or not _is_trusted(peer, networks):
        return peer
    entries = [entry for entry in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if entry.strip()]
    hop = peer
    for entry in reversed(entries):
        address = parse_address(entry)
        if address is None:
            return hop  # garbage where an address should be: the last hop we could read
        if not _is_trusted(address, networks):
            return address  # the right-most untrusted hop
        hop = address
    # Every entry is a trusted address: the right-most one, written by the peer itself; never one further left,
    # which the client may have written.
    return parse_address(entries[-1]) if entries else peer


class _ForwardingReport:
    """Per process: has the "X-Forwarded-For without TRUSTED_PROXIES" warning been logged?"""

    logged = False


def report_untrusted_forwarding(request: HttpRequest) -> None:
    """Log one warning per process when a request arrives with ``X-Forwarded-For`` while ``TRUSTED_PROXIES`` is
    empty: most likely a reverse proxy nobody declared, so every client it forwards shares its address (one
    address's failed logins lock every admin behind it out, and a proxy on the same host is loopback to
    ``/metrics``). A client can send the header itself too, so it is a warning, never a refusal. Called for every
    request by the login throttle's middleware; after the first warning it costs one attribute read."""
    if _ForwardingReport.logged or "HTTP_X_FORWARDED_FOR" not in request.META or settings.TRUSTED_PROXIES:
        return
    _ForwardingReport.logged = True
    logger.warning(
        "a request from %s carries X-Forwarded-For but TRUSTED_PROXIES is empty: the header is ignored, so if a "
        "reverse proxy forwards requests, every client behind it has the proxy's address (the admin login "
        "throttle counts them all as one). Set TRUSTED_PROXIES to the proxy's address or subnet "
        "(docs/runbooks/access.md#every-client-counted-as-one-address). Logged once per process.",
        request.META.get("REMOTE_ADDR") or "an unknown peer",
    )


# The networks a reverse proxy of the shop may be in: private (RFC 1918, IPv6 unique local fc00::/7) and loopback.
# A trusted range outside them takes in addresses that are not yours, whose X-Forwarded-For would then be believed
# (refused in production, skincare.E013; skincare.W010 in development).
PROXY_NETWORKS: tuple[Network, ...] = tuple(
    ipaddress.ip_network(network)
    for network in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "127.0.0.0/8", "fc00::/7", "::1/128")
)


def not_private(networks: Iterable[Network]) -> list[Network]:
    """The ranges of ``networks`` that are not wholly inside a private or loopback network (PROXY_NETWORKS)."""
    return [
        network
        for network in networks
        if not any(
            network.version == allowed.version and network.subnet_of(allowed)  # type: ignore[arg-type]
            for allowed in PROXY_NETWORKS
        )
    ]


def throttle_key(address: Address | None) -> str | None:
    """What failed logins are counted under: an IPv4 address, or for IPv6 the first address of its /64 (one
    subscriber or host usually holds a whole /64, so counting single IPv6 addresses would hand an attacker 2**64
    fresh counters)."""
    if address is None:
        return None
    if isinstance(address, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((address, 64), strict=False).network_address)
    return str(address)
