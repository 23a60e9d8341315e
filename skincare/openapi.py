"""OpenAPI building blocks shared by the apps' ``schemas.py``: the one error body and error responses.

The views validate by hand (``skincare.validation``), so their request and response shapes are described with
``extend_schema`` and these plain serializers; they are never used to parse anything.
"""

import threading
from typing import Any, ClassVar

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from drf_spectacular.views import SpectacularJSONAPIView
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response


class ErrorSerializer(serializers.Serializer):
    """``{"error": "<for humans>", "code": "<stable code>", ...details}``"""

    def get_fields(self) -> dict[str, serializers.Field]:
        # Declared here rather than as class attributes: a field called ``fields`` would shadow Serializer.fields.
        return {
            "error": serializers.CharField(help_text="A message for humans; may change."),
            "code": serializers.CharField(help_text="A stable machine-readable code; see each response's description."),
            "fields": serializers.DictField(
                child=serializers.ListField(child=serializers.CharField()),
                required=False,
                help_text="400 only: the problems per field (`items[0]`, `qty`, ...).",
            ),
            "product_ids": serializers.ListField(
                child=serializers.IntegerField(),
                required=False,
                help_text="409 stock_conflict / 422 invalid_product / 409 sale_not_started / 410 sale_ended: every "
                "product that caused it.",
            ),
            "starts_at": serializers.DateTimeField(
                required=False, help_text="409 sale_not_started: when the cart's last product opens (database clock)."
            ),
        }


def error(description: str, *codes: str) -> OpenApiResponse:
    """An error response whose body is :class:`ErrorSerializer`, with one example per code."""
    return OpenApiResponse(
        response=ErrorSerializer,
        description=f"{description} Codes: {', '.join(f'`{c}`' for c in codes)}.",
        examples=[
            OpenApiExample(code, value={"error": "...", "code": code}, response_only=True, status_codes=None)
            for code in codes
        ],
    )


UNAUTHORIZED = error("Missing or invalid `Authorization: Bearer <token>`.", "unauthorized")
BUSY = error(
    "The database could not serve the request in time (lock timeout, repeated deadlock) or is unreachable; "
    "retry after the `Retry-After` seconds. Nothing was changed.",
    "busy",
    "database_unavailable",
)
UNAVAILABLE = error("The database is unreachable; retry after the `Retry-After` seconds.", "database_unavailable")
INTERNAL = error("A bug: logged in full on the server; nothing internal is in the body.", "internal_error")


class BearerTokenScheme(OpenApiAuthenticationExtension):
    """``skincare.api.BearerTokenAuthentication`` in the schema: HTTP bearer tokens (imported by SkincareConfig)."""

    target_class = "skincare.api.BearerTokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer"}


class SchemaView(SpectacularJSONAPIView):
    """``GET /v1/schema``, generated once per process: drf-spectacular's view walks every route and serializer on
    each request (~14 ms of CPU, an easy way to burn workers anonymously); the routes cannot change while the
    process lives, so the first request's document is kept and served to everyone after it. There is one
    document: the ``?version=`` and ``?lang=`` parameters the base view honours are ignored (the API has one
    version and English only), so no request can grow the cache."""

    _schema: ClassVar[dict[str, Any] | None] = None
    _lock: ClassVar[threading.Lock] = threading.Lock()

    @extend_schema(exclude=True)  # as the base view's get (SERVE_INCLUDE_SCHEMA is off)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        with SchemaView._lock:  # the first requests of a process wait for one generation rather than each run one
            if SchemaView._schema is None:
                generator = self.generator_class(urlconf=self.urlconf, api_version=self.api_version)
                SchemaView._schema = generator.get_schema(request=request, public=self.serve_public)
        filename = self._get_filename(request, self.api_version)
        return Response(data=SchemaView._schema, headers={"Content-Disposition": f'inline; filename="{filename}"'})

    @classmethod
    def forget(cls) -> None:
        """Tests only: drop the kept document."""
        with cls._lock:
            cls._schema = None
