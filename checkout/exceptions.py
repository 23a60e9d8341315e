"""The checkout's own domain errors (its keys and its rate limit): each is one class that declares its code, HTTP
status and fields (see ``skincare.errors``)."""

from dataclasses import field

from skincare.errors import DomainError, RetryAfterError


class _KeyError(DomainError):
    idempotency_key: str


class IdempotencyKeyReused(_KeyError):
    """The customer sent this ``Idempotency-Key`` before with a different request body."""

    code = "idempotency_key_reused"
    http_status = 422
    when = "the `Idempotency-Key` was used before with a different body; nothing written"
    default_message = "This Idempotency-Key was already used with a different request body."


class IdempotencyKeyInProgress(_KeyError):
    """A request with this key has no stored answer yet. Not expected: a concurrent request with the same key waits
    for the first one to commit (or gets 503 busy after DB_LOCK_TIMEOUT_MS); kept as the safe answer regardless."""

    code = "idempotency_key_in_progress"
    http_status = 409
    when = (
        "safety net only: a key without a stored answer (a concurrent duplicate normally waits and replays); retry "
        "after `Retry-After`"
    )
    retry_after = 1
    default_message = "A request with this Idempotency-Key is still being processed; retry shortly."


class RateLimited(RetryAfterError):
    """Too many checkouts by this customer in the current window (CHECKOUT_RATE_LIMIT). The body carries
    ``retry_after`` as well as the header (it is declared as this class's own field)."""

    code = "rate_limited"
    http_status = 429
    when = "more than `CHECKOUT_RATE_LIMIT` checkouts in the current window; retry after `Retry-After`"
    default_message = "Too many checkouts; retry after the time in Retry-After."

    retry_after: int | None = field(default=None, init=False)
    limit: str
