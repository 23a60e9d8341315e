"""The base of every domain error.

Services raise subclasses of :class:`DomainError`; each carries a stable machine-readable ``code``, a
human message and optional details. Only the API layer (``skincare.api``) decides which HTTP status a
domain error becomes.
"""


class DomainError(Exception):
    code = "domain_error"
    default_message = "The request could not be completed."

    def __init__(self, message=None, **details):
        self.message = message or self.default_message
        self.details = details
        super().__init__(self.message)


class InvalidInput(DomainError):
    code = "invalid_request"
    default_message = "The request is invalid."


class ServiceBusy(DomainError):
    """The database could not serve the request in time (lock timeout, repeated deadlocks); retry later."""

    code = "busy"
    default_message = "The shop is busy right now; please retry shortly."
