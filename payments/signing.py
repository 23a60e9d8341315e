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


# Everything a well-formed header can hold, with room to spare: a longer header is refused before it is parsed.
MAX_HEADER_LENGTH = 1024
MAX_TIMESTAMP_DIGITS = 12  # unix seconds until the year 33658
DIGEST_LENGTH = 64  # hex SHA-256


def _is_ascii_digits(text: str) -> bool:
    return 0 < len(text) <= MAX_TIMESTAMP_DIGITS and text.isascii() and text.isdigit()


def _is_hex_digest(text: str) -> bool:
    return len(text) == DIGEST_LENGTH and text.isascii() and all(char in "0123456789abcdef" for char in text.lower())


def verify(*, header: str | None, body: bytes, secret: str, tolerance_seconds: int, now: float | None = None) -> None:
    """Raise :class:`InvalidSignature` unless ``header`` signs ``body``. Any malformed header (huge or non-ASCII
    timestamp, non-hex digest, overlong header) is an InvalidSignature too, never another exception."""
    if not secret:
        raise InvalidSignature("Webhook secret is not configured; refusing all webhooks.")
    if not header:
        raise InvalidSignature("Missing X-Signature header.")
    if len(header) > MAX_HEADER_LENGTH:
        raise InvalidSignature("Malformed X-Signature header.")
    parts: dict[str, list[str]] = {}
    for item in header.split(","):
        key, sep, value = item.strip().partition("=")
        if sep:
            parts.setdefault(key, []).append(value)
    raw_timestamp = parts.get("t", [""])[0]
    if not _is_ascii_digits(raw_timestamp):
        raise InvalidSignature("Malformed X-Signature header.")
    timestamp = int(raw_timestamp)
    now = time.time() if now is None else now
    if abs(now - timestamp) > tolerance_seconds:
        raise InvalidSignature("Webhook timestamp outside the allowed window.")
    expected = _digest(secret=secret, timestamp=timestamp, body=body).encode()
    candidates = [candidate.lower().encode("ascii") for candidate in parts.get("v1", []) if _is_hex_digest(candidate)]
    if not any(hmac.compare_digest(expected, candidate) for candidate in candidates):
        raise InvalidSignature("Webhook signature does not match.")
