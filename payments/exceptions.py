"""Payments' domain errors; each declares its code, HTTP status and fields (see ``skincare.errors``)."""

from typing import Any

from skincare.errors import DomainError


class InvalidSignature(DomainError):
    code = "invalid_signature"
    http_status = 401
    default_message = "Missing or invalid webhook signature."


class _KeyError(DomainError):
    def __init__(self, *, idempotency_key: str) -> None:
        super().__init__()
        self.idempotency_key = idempotency_key

    def data(self) -> dict[str, Any]:
        return {"idempotency_key": self.idempotency_key}


class IdempotencyKeyReused(_KeyError):
    """The customer sent this ``Idempotency-Key`` before with a different request body."""

    code = "idempotency_key_reused"
    http_status = 422
    default_message = "This Idempotency-Key was already used with a different request body."


class IdempotencyKeyInProgress(_KeyError):
    """A request with this key has no stored answer yet. Not expected: a concurrent request with the same key waits
    for the first one to commit (or gets 503 busy after DB_LOCK_TIMEOUT_MS); kept as the safe answer regardless."""

    code = "idempotency_key_in_progress"
    http_status = 409
    retry_after = 1
    default_message = "A request with this Idempotency-Key is still being processed; retry shortly."


class RateLimited(DomainError):
    """Too many checkouts by this customer in the current window (CHECKOUT_RATE_LIMIT)."""

    code = "rate_limited"
    http_status = 429
    default_message = "Too many checkouts; retry after the time in Retry-After."

    def __init__(self, *, retry_after_seconds: int, limit: str) -> None:
        super().__init__()
        self.retry_after = retry_after_seconds
        self.limit = limit

    def data(self) -> dict[str, Any]:
        return {"retry_after": self.retry_after, "limit": self.limit}
