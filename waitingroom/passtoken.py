"""The signed pass a customer polls with (docs/queue.md#polling): who it is and where it stands, verifiable by any
web node without the database.

The token is ``django.core.signing``'s HMAC-SHA256 over a compact JSON object, keyed by ``SECRET_KEY`` (with
``SECRET_KEY_FALLBACKS`` for rotation) and a salt of its own, so no other signed value of the service is a valid pass.
It carries the pass's id, product, customer and position (null until the pass is placed at the opening), and
nothing of the pass's draw. It is signed, not encrypted: everything in it is the customer's own to see.
"""

from dataclasses import dataclass

from django.core import signing

SALT = "waitingroom.pass"
# The request header a client sends its pass in; the join also sets it as the cookie COOKIE_PREFIX<pass id>.
HEADER = "Queue-Pass"
META_HEADER = "HTTP_QUEUE_PASS"
COOKIE_PREFIX = "queue_pass_"


@dataclass(frozen=True)
class SignedPass:
    pass_id: int
    product_id: int
    customer_id: int
    position: int | None


def pass_sign(signed: SignedPass) -> str:
    """The token for ``signed``."""
    payload = {"i": signed.pass_id, "p": signed.product_id, "c": signed.customer_id, "n": signed.position}
    return signing.Signer(salt=SALT).sign_object(payload)


def pass_verify(*, token: str, customer_id: int, pass_id: int) -> SignedPass | None:
    """The pass ``token`` signs, if its signature holds and it is ``customer_id``'s pass ``pass_id``; None for a
    forged, altered, malformed or another customer's token."""
    try:
        payload = signing.Signer(salt=SALT).unsign_object(token)
    except (signing.BadSignature, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(payload, dict) or payload.get("c") != customer_id or payload.get("i") != pass_id:
        return None
    product_id, position = payload.get("p"), payload.get("n")
    if not isinstance(product_id, int) or not (position is None or isinstance(position, int)):
        return None
    return SignedPass(pass_id=pass_id, product_id=product_id, customer_id=customer_id, position=position)
