"""The waiting room's domain errors: each is one class that declares its code, HTTP status and fields (the body's
fields, in this order; see ``skincare.errors``)."""

from datetime import datetime

from skincare.errors import DomainError, RetryAfterError


class QueueNotFound(DomainError):
    """The product has no queue (it sells without one), or the pass asked for is not the customer's."""

    code = "queue_not_found"
    http_status = 404
    when = "joining the queue of a product that has none; no pass of yours (another customer's pass looks the same)"
    default_message = "This product has no queue, or the pass is not yours."

    product_id: int | None = None
    pass_id: int | None = None


class QueueNotOpen(RetryAfterError):
    """The queue opens for joining QUEUE_OPENS_BEFORE_SECONDS before the sale: too early to join."""

    code = "queue_not_open"
    http_status = 409
    when = (
        "joining earlier than `QUEUE_OPENS_BEFORE_SECONDS` before the sale: `opens_at`, `Retry-After`; nothing written"
    )
    default_message = "The queue for this product is not open yet."

    product_id: int
    opens_at: datetime


class QueueSoldOut(DomainError):
    """No unit is available and none is reserved: no unit can come back, joining cannot lead to a purchase."""

    code = "sold_out"
    http_status = 409
    when = "joining a queue when no unit is available and none is reserved (none can come back); nothing written"
    default_message = "Sold out: no unit is left and none can come back."

    product_id: int


class AdmissionRequired(RetryAfterError):
    """A checkout of a queued product without a valid admission. ``queue_urls`` are where to queue (or poll);
    ``pass_states`` the customer's pass per product (``none`` without one). Carries ``Retry-After`` so it is never
    stored under an Idempotency-Key: the same key buys once admitted."""

    code = "admission_required"
    http_status = 409
    when = (
        "a checkout of a product sold through a queue without a valid admission: `product_ids`, `queue_urls` (join "
        "there), `pass_states` (`none`, `waiting`), `Retry-After`; never stored under an `Idempotency-Key` "
        "([queue](docs/queue.md))"
    )
    default_message = "This product sells through a queue: join it and check out when admitted."

    product_ids: list[int]
    queue_urls: list[str]
    pass_states: list[str]


class AdmissionExpired(DomainError):
    """The customer was admitted but did not check out before ``admitted_until``: the turn went to the next in line.
    Final (stored under an Idempotency-Key like other client errors)."""

    code = "admission_expired"
    http_status = 410
    when = (
        "the customer's admission lapsed (`ADMISSION_TTL_SECONDS`) before the checkout; the turn went to the next "
        "in line"
    )
    default_message = "Your admission lapsed before you checked out; the turn went to the next in line."

    product_ids: list[int]


class QueuePassInvalid(DomainError):
    """The signed pass sent with a poll is forged, altered, malformed, or not this customer's pass of this id."""

    code = "queue_pass_invalid"
    http_status = 403
    when = "a poll's signed pass (`Queue-Pass`) is forged, altered or another customer's"
    default_message = "This signed pass is not valid for you: poll without it, or join again to get yours."

    pass_id: int


class QueuePassOutdated(DomainError):
    """The signed pass sent with a poll belongs to an earlier queue of the product: the queue was reset or re-created
    since (a new sale), and its passes went with it. Final: join the new queue for a new pass."""

    code = "queue_pass_outdated"
    http_status = 410
    when = "a poll's signed pass is of the product's earlier queue, reset or re-created since: join again"
    default_message = "This pass was for an earlier queue of this product, which has since been reset: join again."

    pass_id: int


class AdmissionUsed(DomainError):
    """The customer's admission was already used by a checkout (one admission, one checkout): final, no Retry-After
    (stored under an Idempotency-Key like other client errors)."""

    code = "admission_used"
    http_status = 409
    when = "the customer's admission was already used by a checkout: final, no Retry-After"
    default_message = "Your admission was already used by a checkout; one admission buys once."

    product_ids: list[int]


class AdmissionUnitsExceeded(DomainError):
    """A checkout asks for more units of a queued product than one admission buys (QUEUE_UNITS_PER_ADMISSION): the
    queue admits no more buyers than units on the assumption that each buys few. Final; the admission is kept."""

    code = "admission_units_exceeded"
    http_status = 409
    when = "more units of a queued product than one admission buys (`QUEUE_UNITS_PER_ADMISSION`, `max_units`)"
    default_message = "One admission buys at most QUEUE_UNITS_PER_ADMISSION units of a queued product."

    product_ids: list[int]
    max_units: int
