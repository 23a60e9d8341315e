"""The signed pass a customer polls with (docs/queue.md#polling): who it is and where it stands, verifiable by any
web node without the database.

The token is ``django.core.signing``'s HMAC-SHA256 over a compact JSON object, keyed by ``SECRET_KEY`` (with
``SECRET_KEY_FALLBACKS`` for rotation) and a salt of its own, so no other signed value of the service is a valid pass.
It carries the pass's id, product, customer, position (null until the pass is placed at the opening), its queue
(the queue's creation instant: a queue reset or re-created is another queue, whose counters never answer an older
pass) and its arrival instant (``waitingroom.joins`` writes the pass from it if need be), and nothing of the pass's
draw. It is signed, not encrypted: everything in it is the customer's own to see.
"""

from dataclasses import dataclass

from django.core import signing

SALT = "waitingroom.pass"
# The request header a client sends its pass in; the join also sets it as the cookie COOKIE_PREFIX<pass id>.
HEADER = "Queue-Pass"
META_HEADER = "HTTP_QUEUE_PASS"
COOKIE_PREFIX = "queue_pass_"


@dataclass(frozen=True, slots=True)
class SignedPass:
    pass_id: int
    product_id: int
    customer_id: int
    position: int | None
    # The creation instant of the pass's queue, whole microseconds since the epoch; None in a pass signed before
    # passes named their queue (polled through the database, which is exact).
    queue_created_us: int | None
    # The arrival instant on the database's clock, whole microseconds since the epoch (waitingroom.joins): what writes
    # the pass again if its process died before writing it. None in a pass signed before joins were batched.
    joined_us: int | None = None


def pass_sign(signed: SignedPass) -> str:
    """The token for ``signed``."""
    payload = {
        "i": signed.pass_id,
        "p": signed.product_id,
        "c": signed.customer_id,
        "n": signed.position,
        "q": signed.queue_created_us,
        "j": signed.joined_us,
    }
    return signing.Signer(salt=SALT).sign_object(payload)


# The tokens this process verified, with what they sign: a waiting pass sends the same token at every poll, so its
# signature is checked once per process. At most VERIFIED_HELD (then forgotten all at once): 50,000 take about
# 17 MB, the tokens included.
VERIFIED_HELD = 50_000
_verified: dict[str, SignedPass] = {}


def pass_verify(*, token: str, customer_id: int, pass_id: int) -> SignedPass | None:
    """The pass ``token`` signs, if its signature holds and it is ``customer_id``'s pass ``pass_id``; None for a
    forged, altered, malformed or another customer's token."""
    signed = _verified.get(token)
    if signed is None:
        signed = _unsign(token)
        if signed is None:
            return None
        if len(_verified) >= VERIFIED_HELD:
            _verified.clear()
        _verified[token] = signed
    if signed.customer_id != customer_id or signed.pass_id != pass_id:
        return None
    return signed


def _unsign(token: str) -> SignedPass | None:
    """The pass a token signs, if its signature holds and its payload is a pass's; None otherwise."""
    try:
        payload = signing.Signer(salt=SALT).unsign_object(token)
    except (signing.BadSignature, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(payload, dict):
        return None
    pass_id, product_id, customer_id, position = payload.get("i"), payload.get("p"), payload.get("c"), payload.get("n")
    queue_created_us, joined_us = payload.get("q"), payload.get("j")
    if not (isinstance(pass_id, int) and isinstance(product_id, int) and isinstance(customer_id, int)):
        return None
    if not (position is None or isinstance(position, int)):
        return None
    if not (queue_created_us is None or isinstance(queue_created_us, int)):
        return None
    if not (joined_us is None or isinstance(joined_us, int)):
        return None
    return SignedPass(
        pass_id=pass_id,
        product_id=product_id,
        customer_id=customer_id,
        position=position,
        queue_created_us=queue_created_us,
        joined_us=joined_us,
    )
