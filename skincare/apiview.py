"""The one request path of the API (``ApiView.dispatch``): every endpoint's request is authenticated, permitted,
handed to its method and answered here, in this order, and nowhere else.

An ``ApiView`` is a DRF ``APIView`` for what DRF is kept for: describing the API (drf-spectacular reads each view's
classes and ``extend_schema`` to write the OpenAPI document) and the permission classes. It does not use DRF's request
handling: ``dispatch`` below replaces it (no ``Request`` wrapper, content negotiation, throttles, versioning or
template rendering), so an answer costs what the endpoint itself does. Kept apart from ``skincare.api``, which DRF's
settings name (importing DRF's views from there would import those settings' classes while their module loads)."""

from typing import Any, NoReturn

from django.http import HttpRequest, HttpResponseBase
from rest_framework import exceptions
from rest_framework.metadata import SimpleMetadata
from rest_framework.views import APIView

from skincare.api import ApiRequest, ApiResponse, exception_handler


class ApiView(APIView):
    """Every endpoint's view. ``dispatch`` is the request path, step by step:

    1. authenticate: the first of ``authentication_classes`` that recognises the request names the user (none: the
       user is None); a bad token is 401;
    2. permit: every one of ``permission_classes`` must allow the request (401 without a user, else 403);
    3. the method: the view's method of the request's HTTP method (405 with ``Allow`` when it has none), given an
       ``ApiRequest`` (the body parsed when the method reads ``data``);
    4. any exception becomes its JSON answer (``skincare.api.exception_handler``: a domain error's own status, code,
       fields and headers; an outage's 503);
    5. every answer carries ``Allow`` (the view's methods).
    """

    def setup(self, request: HttpRequest, *args: Any, **kwargs: Any) -> None:
        """Django's ``View.setup`` without its ``self.head = self.get``: a view holding a method bound to itself is a
        cycle, and it would keep the request (body, headers) until the cyclic garbage collector walks it. HEAD is
        answered by ``get`` in ``dispatch`` instead."""
        self.request, self.args, self.kwargs = request, args, kwargs  # type: ignore[assignment]  # Django's, not DRF's Request

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        api_request = ApiRequest(request, None)
        try:
            # The user on Django's request too, for whatever reads it there after the view (the access log).
            api_request.user = request.user = self.authenticated_user(request)
            self.check_permissions(api_request)  # type: ignore[arg-type]  # DRF's permissions read request.user
            method = (request.method or "").lower()
            handler = getattr(self, method, None) if method in self.http_method_names else None
            if handler is None and method == "head":
                handler = getattr(self, "get", None)
            if handler is None:
                raise exceptions.MethodNotAllowed(method.upper())
            response = handler(api_request, *args, **kwargs)
        except Exception as exc:
            response = exception_handler(exc, {"view": self})
        response["Allow"] = self.allow()
        return response

    def authenticated_user(self, request: HttpRequest) -> Any:
        for authenticator in self.get_authenticators():
            found = authenticator.authenticate(request)
            if found is not None:
                return found[0]
        return None

    def permission_denied(self, request: Any, message: str | None = None, code: str | None = None) -> NoReturn:
        """A permission class refused: 401 when no credentials named a user, else 403 (DRF's rule)."""
        if request.user is None and self.authentication_classes:
            raise exceptions.NotAuthenticated()
        raise exceptions.PermissionDenied(detail=message, code=code)

    def options(self, request: Any, *args: Any, **kwargs: Any) -> ApiResponse:  # type: ignore[override]
        """``OPTIONS``: what the view is, renders and parses (DRF's metadata)."""
        return ApiResponse(SimpleMetadata().determine_metadata(request, self))

    @classmethod
    def allow(cls) -> str:
        """The ``Allow`` header: the HTTP methods the view answers (HEAD wherever GET), made once per class."""
        allow = _ALLOW.get(cls)
        if allow is None:
            methods = [m for m in cls.http_method_names if hasattr(cls, m) or (m == "head" and hasattr(cls, "get"))]
            allow = _ALLOW[cls] = ", ".join(m.upper() for m in methods)
        return allow

    def get_authenticators(self) -> list[Any]:
        return _instances(self.authentication_classes)

    def get_permissions(self) -> list[Any]:
        return _instances(self.permission_classes)


# Each list of classes a view names (by identity: the list itself is kept, so its id is never reused), with one
# instance of each (none keeps state of a request, so the threads of a worker share them); and each view class's
# ``Allow`` header.
_INSTANCES: dict[int, tuple[Any, list[Any]]] = {}
_ALLOW: dict[type, str] = {}


def _instances(classes: Any) -> list[Any]:
    cached = _INSTANCES.get(id(classes))
    if cached is None or cached[0] is not classes:
        cached = _INSTANCES[id(classes)] = (classes, [cls() for cls in classes])
    return cached[1]
