"""The client's address, behind trusted reverse proxies (``TRUSTED_PROXIES``), for the admin login throttle and
``/metrics``' loopback rule.

Without trusted proxies the address is the TCP peer (``REMOTE_ADDR``) and ``X-Forwarded-For`` is ignored: any
client can write that header. When the peer is a trusted proxy, the header's entries are read from the right (each
proxy appends the address it received the request from) and the first one that is not itself a trusted proxy is
the client; entries further left were written by the client and are never believed. An unreadable entry where the
client should be falls back to the peer.
"""

import functools
import ipaddress
from collections.abc import Iterable

from django.conf import settings
from django.http import HttpRequest

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


def _address(value: str | None) -> Address | None:
    if not value:
        return None
    try:
        address = ipaddress.ip_address(value.strip())
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _is_trusted(address: Address, networks: tuple[Network, ...]) -> bool:
    return any(address.version == network.version and address in network for network in networks)


def client_address(request: HttpRequest) -> Address | None:
    """The client's address: the peer, or behind trusted proxies the right-most untrusted ``X-Forwarded-For`` entry."""
    peer = _address(request.META.get("REMOTE_ADDR"))
    networks = trusted_proxies()
    if peer is None or not networks or not _is_trusted(peer, networks):
        return peer
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    hop = peer
    for entry in reversed(forwarded.split(",")):
        address = _address(entry)
        if address is None:
            return hop  # garbage where an address should be: the last hop we could read
        if not _is_trusted(address, networks):
            return address
        hop = address
    return hop  # every hop is a trusted proxy (a request from the proxies themselves)


def throttle_key(address: Address | None) -> str | None:
    """What failed logins are counted under: an IPv4 address, or for IPv6 the first address of its /64 (one
    subscriber or host usually holds a whole /64, so counting single IPv6 addresses would hand an attacker 2**64
    fresh counters)."""
    if address is None:
        return None
    if isinstance(address, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((address, 64), strict=False).network_address)
    return str(address)
