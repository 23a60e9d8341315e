"""The waiting room's domain errors; each declares its code, HTTP status and fields (see ``skincare.errors``)."""

from datetime import datetime
from typing import Any

from skincare.errors import DomainError


class QueueNotFound(DomainError):
    """The product has no queue (it sells without one), or the pass asked for is not the customer's."""

    code = "queue_not_found"
    http_status = 404
    default_message = "This product has no queue, or the pass is not yours."

    def __init__(self, *, product_id: int | None = None, pass_id: int | None = None) -> None:
        super().__init__()
        self.product_id = product_id
        self.pass_id = pass_id

    def data(self) -> dict[str, Any]:
        return {"product_id": self.product_id, "pass_id": self.pass_id}


class QueueNotOpen(DomainError):
    """The queue opens for joining QUEUE_OPENS_BEFORE_SECONDS before the sale: too early to join."""

    code = "queue_not_open"
    http_status = 409
    default_message = "The queue for this product is not open yet."

    def __init__(self, *, product_id: int, opens_at: datetime, retry_after_seconds: int) -> None:
        super().__init__()
        self.product_id = product_id
        self.opens_at = opens_at
        self.retry_after = retry_after_seconds

    def data(self) -> dict[str, Any]:
        return {"product_id": self.product_id, "opens_at": self.opens_at.isoformat().replace("+00:00", "Z")}


class QueueSoldOut(DomainError):
    """No unit is available and none is reserved: no unit can come back, joining cannot lead to a purchase."""

    code = "sold_out"
    http_status = 409
    default_message = "Sold out: no unit is left and none can come back."

    def __init__(self, *, product_id: int) -> None:
        super().__init__()
        self.product_id = product_id

    def data(self) -> dict[str, Any]:
        return {"product_id": self.product_id}


class AdmissionRequired(DomainError):
    """A checkout of a queued product without a valid admission. ``queue_urls`` are where to queue (or poll);
    ``pass_states`` the customer's pass per product (``none`` without one). Carries ``Retry-After`` so it is never
    stored under an Idempotency-Key: the same key buys once admitted."""

    code = "admission_required"
    http_status = 409
    default_message = "This product sells through a queue: join it and check out when admitted."

    def __init__(
        self, *, product_ids: list[int], queue_urls: list[str], pass_states: list[str], retry_after_seconds: int
    ) -> None:
        super().__init__()
        self.product_ids = product_ids
        self.queue_urls = queue_urls
        self.pass_states = pass_states
        self.retry_after = retry_after_seconds

    def data(self) -> dict[str, Any]:
        return {"product_ids": self.product_ids, "queue_urls": self.queue_urls, "pass_states": self.pass_states}


class AdmissionExpired(DomainError):
    """The customer was admitted but did not check out before ``admitted_until``: the turn went to the next in line.
    Final (stored under an Idempotency-Key like other client errors)."""

    code = "admission_expired"
    http_status = 410
    default_message = "Your admission lapsed before you checked out; the turn went to the next in line."

    def __init__(self, *, product_ids: list[int]) -> None:
        super().__init__()
        self.product_ids = product_ids

    def data(self) -> dict[str, Any]:
        return {"product_ids": self.product_ids}
