"""The base of every domain error, in the style of Zulip's ``JsonableError``.

Services raise subclasses of :class:`DomainError`. Each subclass declares everything an answer needs: a stable
machine-readable ``code``, the ``http_status``, a human ``default_message``, ``retry_after`` (sent as
``Retry-After``) for the retryable ones, and its own fields through a typed constructor and :meth:`data`, so each
code has exactly one body shape. :meth:`body` is that JSON body; the one exception handler
(``skincare.api.exception_handler``) sends it and imports nothing from the apps, so a new error is one class in the
app that raises it and one row in the README's error table.
"""

from typing import Any, ClassVar

from django.utils.module_loading import autodiscover_modules

# code -> the class that declares it, filled as each class is defined (``DomainError.__init_subclass__``).
_DECLARED: dict[str, type["DomainError"]] = {}


class DomainError(Exception):
    code: ClassVar[str] = "domain_error"
    http_status: ClassVar[int] = 400
    default_message: ClassVar[str] = "The request could not be completed."
    # A 5xx domain error is a bug or corruption: its message and fields are logged, never sent to the client.
    expose: ClassVar[bool] = True
    # Seconds a client should wait before retrying (sent as ``Retry-After``); None when retrying cannot help. A
    # subclass declares it, or sets it per instance when the wait depends on the case (rate limits).
    retry_after: int | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "code" in cls.__dict__:
            other = _DECLARED.setdefault(cls.code, cls)
            if other is not cls:
                raise TypeError(f"error code {cls.code!r} is declared twice: {other.__qualname__}, {cls.__qualname__}")

    def __init__(self, message: str | None = None) -> None:
        self.message = message or self.default_message
        super().__init__(self.message)

    def data(self) -> dict[str, Any]:
        """The code's own fields, beside ``error`` and ``code`` (the same keys every time for one code)."""
        return {}

    def body(self) -> dict[str, Any]:
        """The JSON answer: ``{"error": "<for humans>", "code": "<stable>", ...the code's fields}``."""
        return error_body(self.message, self.code, **self.data())

    @property
    def headers(self) -> dict[str, str]:
        return {} if self.retry_after is None else {"Retry-After": str(self.retry_after)}


def error_body(message: str, code: str, **fields: Any) -> dict[str, Any]:
    """The one error shape, for domain errors and for the framework's own refusals (404, 415, malformed JSON …)."""
    return {"error": message, "code": code, **fields}


class InvalidInput(DomainError):
    """The request is malformed; ``fields`` maps each offending field to what it must be."""

    code = "invalid_request"
    http_status = 400
    default_message = "The request is invalid."

    def __init__(self, message: str | None = None, *, fields: dict[str, list[str]] | None = None) -> None:
        super().__init__(message)
        self.fields = fields or {}

    def data(self) -> dict[str, Any]:
        return {"fields": self.fields}


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


def declared_errors() -> dict[str, type[DomainError]]:
    """Every error code the installed apps declare, with its class. Each app's errors live in its ``exceptions``
    module, imported here first (as the admin discovers ``admin.py``), so the answer does not depend on which
    modules happened to be loaded; the foundation names no app."""
    autodiscover_modules("exceptions")
    return dict(_DECLARED)
