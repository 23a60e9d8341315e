"""The base of every domain error, in the style of Zulip's ``JsonableError``: one error code is one class.

Services raise subclasses of :class:`DomainError`. A subclass declares everything an answer needs, once: a stable
machine-readable ``code``, the ``http_status``, a human ``default_message``, ``retry_after`` (sent as
``Retry-After``) for the retryable ones, and its own fields as annotated class attributes, as a dataclass declares
them. From those declarations come the keyword-only, typed constructor (every subclass is a dataclass) and
:meth:`DomainError.data`: the fields in declaration order, so each code has exactly one body shape. ``message``
(the body's ``error``) and ``retry_after`` (a header) are not fields of the body, unless a class declares
``retry_after`` as its own field (``rate_limited`` does). :meth:`body` is the JSON body; the one exception handler
(``skincare.api.exception_handler``) sends it and imports nothing from the apps. A code whose wait depends on the
case derives from :class:`RetryAfterError` and is raised with ``retry_after_seconds``.

Every class that declares a ``code`` is registered as it is defined (a code declared twice is an error at import),
and :func:`declared_errors` lists them all, so a new error is one class in its app's ``exceptions.py``:
``/metrics`` labels it (``skincare.metrics``), and the README's error table shows it. An exposed class also declares
``when``, its row's text in that table (a class without it is an error at import); ``python -m devtools.docgen``
writes the table from these classes and from :data:`FRAMEWORK_ANSWERS`, the rows of the API layer's own refusals.
Those refusals' codes (``FRAMEWORK_CODES``) are listed here too: :func:`answer_codes` is every code an answer can
carry.

One renderer of error answers for plain Django views and middleware: :func:`error_response`.
"""

import dataclasses
import math
from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar, dataclass_transform

from django.http import JsonResponse
from django.utils.module_loading import autodiscover_modules
from rest_framework import exceptions as drf_exceptions

from skincare.timestamps import utc_z

# The code of each refusal of the REST framework (``skincare.api.exception_handler`` answers with it).
DRF_CODES: dict[type[drf_exceptions.APIException], str] = {
    drf_exceptions.ParseError: "malformed_json",
    drf_exceptions.AuthenticationFailed: "unauthorized",
    drf_exceptions.NotAuthenticated: "unauthorized",
    drf_exceptions.PermissionDenied: "forbidden",
    drf_exceptions.NotFound: "not_found",
    drf_exceptions.MethodNotAllowed: "method_not_allowed",
    drf_exceptions.UnsupportedMediaType: "unsupported_media_type",
    drf_exceptions.NotAcceptable: "not_acceptable",
    drf_exceptions.Throttled: "throttled",
    drf_exceptions.ValidationError: "invalid_request",
}

# Every code of an answer that is not a DomainError's: the REST framework's refusals and the API layer's own bodies.
FRAMEWORK_CODES = frozenset(
    {*DRF_CODES.values(), "internal_error", "payload_too_large", "bad_request", "not_found", "csrf_failed"}
)

# The text of the one 404 row of the README's error table that the missing resources share with the API layer's own
# ``not_found``: the classes of those codes and the framework's row below all say ``when = NOT_FOUND_WHEN``.
NOT_FOUND_WHEN = (
    "not your order (or cart: someone else's or unknown); `GET /v1/products/<id>` of a product that does not exist or "
    "is not for sale; no such path"
)

# code -> the class that declares it, filled as each class is defined (``DomainError.__init_subclass__``).
_DECLARED: dict[str, type["DomainError"]] = {}
# The field metadata of what a DomainError carries outside the body's own fields.
_NOT_IN_BODY = {"in_body": False}


def _jsonable(value: Any) -> Any:
    """A field's value in the body: a timestamp as the API renders every timestamp (``utc_z``), anything else as
    it is. A field that its clients know in another form declares its own (``dataclasses.field(metadata={"json":
    ...})``)."""
    return utc_z(value) if isinstance(value, datetime) else value


@dataclass_transform(kw_only_default=True, eq_default=False, field_specifiers=(dataclasses.field,))
@dataclasses.dataclass(eq=False)
class DomainError(Exception):
    code: ClassVar[str] = "domain_error"
    http_status: ClassVar[int] = 400
    default_message: ClassVar[str] = "The request could not be completed."
    # A 5xx domain error is a bug or corruption: its message and fields are logged, never sent to the client.
    expose: ClassVar[bool] = True
    # When a client gets this code: the text of its row in the README's error table (Markdown; links relative to
    # the repository root). Every exposed class that declares a ``code`` declares its own. Classes of one status
    # with the same text share one row (``NOT_FOUND_WHEN``).
    when: ClassVar[str] = ""
    # For humans; ``default_message`` when empty. The one positional argument of every error.
    message: str = dataclasses.field(default="", metadata=_NOT_IN_BODY)
    # Seconds a client should wait before retrying (sent as ``Retry-After``); None when retrying cannot help. A
    # subclass sets it (``retry_after = 1``), or sets it per instance when the wait depends on the case.
    retry_after: int | None = dataclasses.field(default=None, init=False, repr=False, metadata=_NOT_IN_BODY)
    # The body's fields, each with how its value is written: read once per class (``body_fields_of``).
    _body_fields: ClassVar[tuple[tuple[str, Callable[[Any], Any]], ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        dataclasses.dataclass(cls, kw_only=True, eq=False)
        if "code" in cls.__dict__:
            other = _DECLARED.get(cls.code)
            if other is not None:
                raise TypeError(f"error code {cls.code!r} is declared twice: {other.__qualname__}, {cls.__qualname__}")
            if cls.expose and not cls.__dict__.get("when", "").strip():
                raise TypeError(
                    f"{cls.__qualname__} declares the error code {cls.code!r} but no `when`: the text of its row in "
                    "the README's error table (an error that is never sent declares expose = False instead)"
                )
            _DECLARED[cls.code] = cls
        cls._body_fields = body_fields_of(cls)

    def __post_init__(self) -> None:
        self.message = self.message or self.default_message
        Exception.__init__(self, self.message)

    def data(self) -> dict[str, Any]:
        """The code's own fields, beside ``error`` and ``code``: the declared fields, in declaration order."""
        return {name: as_json(getattr(self, name)) for name, as_json in self._body_fields}

    def body(self) -> dict[str, Any]:
        """The JSON answer: ``{"error": "<for humans>", "code": "<stable>", ...the code's fields}``."""
        return error_body(self.message, self.code, **self.data())

    @property
    def headers(self) -> dict[str, str]:
        return {} if self.retry_after is None else {"Retry-After": str(self.retry_after)}


def body_fields_of(cls: type[DomainError]) -> tuple[tuple[str, Callable[[Any], Any]], ...]:
    """A DomainError class's body fields in declaration order, each with how its value is written (its field's
    ``json`` metadata, else ``_jsonable``); a field declared with ``metadata={"in_body": False}`` is not one."""
    return tuple(
        (f.name, f.metadata.get("json", _jsonable)) for f in dataclasses.fields(cls) if f.metadata.get("in_body", True)
    )


class RetryAfterError(DomainError):
    """A domain error whose wait depends on the case: raised with ``retry_after_seconds`` (rounded up to whole
    seconds, at least 1), sent as ``Retry-After``."""

    retry_after_seconds: float = dataclasses.field(repr=False, metadata=_NOT_IN_BODY)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.retry_after = max(1, math.ceil(self.retry_after_seconds))


def error_body(message: str, code: str, **fields: Any) -> dict[str, Any]:
    """The one error shape, for domain errors and for the framework's own refusals (404, 415, malformed JSON …)."""
    return {"error": message, "code": code, **fields}


def error_response(
    message: str, code: str, *, http_status: int, retry_after: int | None = None, **fields: Any
) -> JsonResponse:
    """An error answer of a plain Django view or middleware (the REST framework's views answer through
    ``skincare.api.exception_handler``): the one body shape, its status, ``Retry-After`` when given."""
    response = JsonResponse(error_body(message, code, **fields), status=http_status)
    if retry_after is not None:
        response["Retry-After"] = str(retry_after)
    return response


def forbidden_response() -> JsonResponse:
    """403 ``forbidden``: what every view answers a caller it does not serve (the API, /metrics, the admin's JSON)."""
    return error_response("Forbidden.", "forbidden", http_status=403)


def declared_errors() -> dict[str, type[DomainError]]:
    """Every error code the installed apps declare, with its class. Each app's errors live in its ``exceptions``
    module, imported here first (as the admin discovers ``admin.py``), so the answer does not depend on which
    modules happened to be loaded; the foundation names no app."""
    autodiscover_modules("exceptions")
    return dict(_DECLARED)


def answer_codes() -> frozenset[str]:
    """Every error code an answer can carry: the API layer's own and every declared one."""
    return FRAMEWORK_CODES | frozenset(declared_errors())


class InvalidInput(DomainError):
    """The request is malformed; ``fields`` maps each offending field to what it must be."""

    code = "invalid_request"
    http_status = 400
    when = (
        "bad body: missing/empty `items`, more than `CHECKOUT_MAX_ITEMS` (20) lines, a `product_id` not in 1 … "
        "2^63−1, a `qty` not in 1 … `CHECKOUT_MAX_QTY` (100), more than `CHECKOUT_MAX_QTY` units of a product over "  # noqa: RUF001 - the README's typography
        "its lines; an `Idempotency-Key` that is not 1–255 printable ASCII characters. `/v1/schema` states each "  # noqa: RUF001
        "limit (`minItems`, `maxItems`, `maximum`, the key's `pattern`)"
    )
    default_message = "The request is invalid."

    fields: dict[str, list[str]] = dataclasses.field(default_factory=dict)


class ServiceBusy(DomainError):
    """The database could not serve the request in time (lock timeout, repeated deadlocks); retry later."""

    code = "busy"
    http_status = 503
    when = (
        "a lock could not be had within `DB_LOCK_TIMEOUT_MS`, or a deadlock/serialization failure persisted through "
        "the retries (`serializable` products under a storm); or, with `X-Shed-By: front`, the front could not "
        "start the request on a worker within its queue bound and the application never saw it "
        "([overload](docs/runbooks/overload.md#a-fast-503-never-a-time-out)); retry after `Retry-After`"
    )
    retry_after = 1
    default_message = "The shop is busy right now; please retry shortly."


class DatabaseUnavailable(DomainError):
    """The database cannot be reached (down, restarting, refusing connections); retry later."""

    code = "database_unavailable"
    http_status = 503
    when = "the database cannot be reached (down, restarting); `Retry-After: 2`, every endpoint but `/healthz`"
    retry_after = 2
    default_message = "The shop's database is unavailable right now; please retry shortly."


@dataclasses.dataclass(frozen=True)
class Answer:
    """A row of the README's error table that no exposed ``DomainError`` declares: the API layer's own refusals
    (``codes``, each one of ``FRAMEWORK_CODES``) and the success a client expects (no code)."""

    status: int
    codes: tuple[str, ...]
    when: str


# The rows of the README's error table for the API layer's own answers. A row whose ``when`` is a class's (same
# status, same text) is that class's row: its codes are listed together.
FRAMEWORK_ANSWERS = (
    Answer(
        201,
        (),
        "order created, stock reserved (`/v1/checkout`, `/v1/carts/<id>/checkout`); cart created (`/v1/carts`)",
    ),
    Answer(400, ("malformed_json",), InvalidInput.when),
    Answer(401, ("unauthorized",), "missing, invalid, expired or revoked Bearer token"),
    Answer(404, ("not_found",), NOT_FOUND_WHEN),
    Answer(413, ("payload_too_large",), "a body over `REQUEST_MAX_BODY_BYTES` (default 2.5 MiB), on every endpoint"),
    Answer(
        500,
        ("internal_error",),
        "a bug, or counters that disagree with reservations (`inventory_corrupted`, never sent as such): logged in "
        "full, nothing internal in the response",
    ),
)
