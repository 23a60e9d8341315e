"""The signed links of ``payment_url``: the sandbox's page (``payments.sandbox``) and the one that opens a gateway's
page (``payments.sessions``).

A link names the order, its customer and the order's payment deadline, signed with ``SECRET_KEY``
(``SECRET_KEY_FALLBACKS`` for rotation) under a salt of its page, so no other signed value of the service is a valid
link and someone else's order in a forged or altered link is a 404. It holds nothing that changes while the order is
pending, so every answer that shows the order shows the same link (an idempotent checkout's replay is the first
answer, byte for byte), and it is refused from ``LINK_GRACE_SECONDS`` after the deadline by the database's clock
(the caller's ``now``): long enough for a buyer who paid at the last moment to see the outcome.
"""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.core import signing
from django.http import Http404

LINK_GRACE_SECONDS = 900


@dataclass(frozen=True)
class Link:
    order_id: int
    customer_id: int
    until: datetime  # the order's payment deadline, whole seconds

    def expired(self, *, now: datetime) -> bool:
        return now > self.until + timedelta(seconds=LINK_GRACE_SECONDS)


def link_sign(*, salt: str, order_id: int, customer_id: int, until: datetime) -> str:
    """The token of a link to ``order_id`` of ``customer_id`` whose payment deadline is ``until``."""
    payload = {"order": order_id, "customer": customer_id, "until": int(until.timestamp())}
    return signing.Signer(salt=salt).sign_object(payload)


def link_read(token: str, *, salt: str) -> Link:
    """The link ``token`` signs under ``salt``; 404 when forged, altered or malformed (its expiry is the caller's,
    on the database's clock: :meth:`Link.expired`)."""
    try:
        claims = signing.Signer(salt=salt).unsign_object(token)
    except (signing.BadSignature, ValueError, UnicodeDecodeError):
        raise Http404("invalid payment link") from None
    if not isinstance(claims, dict) or not all(type(claims.get(k)) is int for k in ("order", "customer", "until")):
        raise Http404("invalid payment link")
    return Link(claims["order"], claims["customer"], datetime.fromtimestamp(claims["until"], tz=UTC))
