"""The one view class of the API (``ApiView``): DRF's dispatch, with nothing built twice.

Kept apart from ``skincare.api``, which DRF's settings name (importing DRF's views from there would import those
settings' classes while their module loads)."""

from collections.abc import Sequence
from typing import Any

from rest_framework.authentication import BaseAuthentication
from rest_framework.parsers import BaseParser
from rest_framework.permissions import BasePermission
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView


class ApiView(APIView):
    """Every endpoint's view: DRF's ``APIView``, its dispatch as it is, with what it builds again on each request
    made once per view class instead: the renderer, parser, authentication and permission instances (none keeps
    state of a request, so the threads of a worker share them) and the ``Allow`` header. Throttles stay DRF's, new
    per request: a throttle keeps the request it judges (its key, its history). The per-request work left is the request's own: its
    authentication, its body, the view, the answer; and once the answer is rendered, the view lets go of
    what it held (``_release_cycles``), so nothing waits for the cyclic garbage collector."""

    def get_renderers(self) -> list[BaseRenderer]:
        return _instances(self.renderer_classes)

    def get_parsers(self) -> list[BaseParser]:
        return _instances(self.parser_classes)

    def get_authenticators(self) -> list[BaseAuthentication]:
        return _instances(self.authentication_classes)

    def get_permissions(self) -> list[BasePermission]:
        return _instances(self.permission_classes)

    @property
    def default_response_headers(self) -> dict[str, str]:
        cls = type(self)
        headers = _HEADERS.get(cls)
        if headers is None:
            headers = _HEADERS[cls] = super().default_response_headers
        return dict(headers)

    def finalize_response(self, request: Request, response: Response, *args: Any, **kwargs: Any) -> Response:
        response = super().finalize_response(request, response, *args, **kwargs)
        if isinstance(response, Response):  # rendered later, by Django's handler
            response.add_post_render_callback(self._release_cycles)
        else:  # a plain Django response (the payment page's redirect): nothing left to render
            self._release_cycles(None)
        return response

    def _release_cycles(self, response: Response | None) -> None:
        """Once the answer is rendered, let go of what rendering needed. DRF's view, request and response refer to
        each other (the view holds both; the request's parser context and the response's renderer context hold
        the view and themselves), so without this all three, with the request's body and headers, wait for
        Python's cyclic garbage collector; with it, reference counting frees them when the server is done."""
        self.request.parser_context = {}
        if response is not None:
            response.renderer_context = {}  # type: ignore[attr-defined]  # DRF sets it; its stubs do not declare it
        self.__dict__.clear()


# Each list of classes a view names (by identity: the list itself is kept, so its id is never reused), with one
# instance of each; and each view class's default headers.
_INSTANCES: dict[int, tuple[Sequence[Any], list[Any]]] = {}
_HEADERS: dict[type, dict[str, str]] = {}


def _instances(classes: Sequence[Any]) -> list[Any]:
    cached = _INSTANCES.get(id(classes))
    if cached is None or cached[0] is not classes:
        cached = _INSTANCES[id(classes)] = (classes, [cls() for cls in classes])
    return cached[1]
