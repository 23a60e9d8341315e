"""Webhook signatures in the style of the big gateways.

``X-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">`` keyed with
``PAYMENT_WEBHOOK_SECRET``. Comparison is constant-time; timestamps older (or further in the future) than
the tolerance are refused, so a captured request cannot be replayed later.
"""

import hashlib
import hmac
import time

from payments.exceptions import InvalidSignature


def _digest(*, secret: str, timestamp: int, body: bytes) -> str:
    """Hex HMAC-SHA256 of ``"<timestamp>.<raw body>"``: the one place the signature is computed."""
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def sign(*, body: bytes, secret: str, timestamp: int | None = None) -> str:
    timestamp = int(time.time()) if timestamp is None else timestamp
    return f"t={timestamp},v1={_digest(secret=secret, timestamp=timestamp, body=body)}"


def verify(*, header: str | None, body: bytes, secret: str, tolerance_seconds: int, now: float | None = None) -> None:
    if not secret:
        raise InvalidSignature("Webhook secret is not configured; refusing all webhooks.")
    if not header:
        raise InvalidSignature("Missing X-Signature header.")
    parts: dict[str, list[str]] = {}
    for item in header.split(","):
        key, sep, value = item.strip().partition("=")
        if sep:
            parts.setdefault(key, []).append(value)
    try:
        timestamp = int(parts["t"][0])
    except (KeyError, ValueError):
        raise InvalidSignature("Malformed X-Signature header.") from None
    now = time.time() if now is None else now
    if abs(now - timestamp) > tolerance_seconds:
        raise InvalidSignature("Webhook timestamp outside the allowed window.")
    expected = _digest(secret=secret, timestamp=timestamp, body=body)
    if not any(hmac.compare_digest(expected, candidate) for candidate in parts.get("v1", [])):
        raise InvalidSignature("Webhook signature does not match.")
