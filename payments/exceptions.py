"""Payments' domain errors; each declares its code and HTTP status (see ``skincare.errors``)."""

from typing import Any

from skincare.errors import DomainError


class InvalidSignature(DomainError):
    code = "invalid_signature"
    http_status = 401
    default_message = "Missing or invalid webhook signature."


class IdempotencyKeyReused(DomainError):
    """The customer sent this ``Idempotency-Key`` before with a different request body."""

    code = "idempotency_key_reused"
    http_status = 422
    default_message = "This Idempotency-Key was already used with a different request body."


class IdempotencyKeyInProgress(DomainError):
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
    retry_after = 1
    default_message = "Too many checkouts; retry after the time in Retry-After."

    def __init__(self, message: str | None = None, *, retry_after_seconds: int, **details: Any) -> None:
        super().__init__(message, retry_after=retry_after_seconds, **details)
        self.retry_after_seconds = retry_after_seconds

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_seconds)}
