"""The base of every domain error, in the style of Zulip's ``JsonableError``.

Services raise subclasses of :class:`DomainError`. Each subclass declares everything the API needs to answer
for it: a stable machine-readable ``code``, the ``http_status``, a human ``default_message`` and extra
response ``headers`` (``Retry-After`` for the retryable ones). The one exception handler
(``skincare.api.exception_handler``) reads those attributes and imports nothing from the apps, so a new
error is one class in the app that raises it and one row in the README's error table.
"""

from typing import Any, ClassVar


class DomainError(Exception):
    code: ClassVar[str] = "domain_error"
    http_status: ClassVar[int] = 400
    default_message: ClassVar[str] = "The request could not be completed."
    # Seconds a client should wait before retrying (sent as ``Retry-After``); None when retrying cannot help.
    retry_after: ClassVar[int | None] = None
    # A 5xx domain error is a bug or corruption: its message and details are logged, never sent to the client.
    expose: ClassVar[bool] = True

    def __init__(self, message: str | None = None, **details: Any) -> None:
        self.message = message or self.default_message
        self.details = details
        super().__init__(self.message)

    @property
    def headers(self) -> dict[str, str]:
        return {} if self.retry_after is None else {"Retry-After": str(self.retry_after)}


class InvalidInput(DomainError):
    code = "invalid_request"
    http_status = 400
    default_message = "The request is invalid."


class ServiceBusy(DomainError):
    """The database could not serve the request in time (lock timeout, repeated deadlocks); retry later."""

    code = "busy"
    http_status = 503
    retry_after = 1
    default_message = "The shop is busy right now; please retry shortly."


class DatabaseUnavailable(DomainError):
    """The database cannot be reached (down, restarting, refusing connections); retry later."""

    code = "database_unavailable"
    http_status = 503
    retry_after = 2
    default_message = "The shop's database is unavailable right now; please retry shortly."
