"""A sandbox payment gateway for development (enabled only with ``PAYMENT_SANDBOX=true``; with DEBUG off it only
starts with the demo-only opt-in ``PAYMENT_SANDBOX_ALLOW_WITHOUT_DEBUG``, see ``payments.checks``).

``payment_url`` from checkout is a signed, expiring link (``payments.links``) to a page with *Pay* and *Fail*
buttons: the link names the order and its customer, so the page acts on that one order of that one customer and
nothing else (someone else's order id in a forged or altered link is a 404). The form is CSRF-protected. Pressing a button makes this
module act like a gateway: it builds an event, signs it with ``PAYMENT_WEBHOOK_SECRET`` and POSTs it to the fixed
``PAYMENT_SANDBOX_WEBHOOK_URL``, never to an address taken from the request, so the click walks exactly the path
production payments take.

A press acts only on a pending order whose payment window is open (database clock), and each button once: the
event id is ``sandbox-<order>-<action>``, so a second press (or a press in another worker at the same moment) is
the same event, which the webhook applies once. A press that would change nothing sends nothing and shows the
order as it is (409). Deliveries run on one executor per process with a single thread (``_EXECUTOR``), not a thread
per press: the page cannot post to this service synchronously, because with one sync gunicorn worker the webhook
request would wait for the very worker that sends it.
"""

import json
import logging
import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse

from orders.models import Order
from orders.selectors import OrderView
from payments import links, services, signing
from payments.models import ProcessedEvent
from skincare.db import db_now

logger = logging.getLogger(__name__)

LINK_SALT = "payments.sandbox.link"

_EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox-webhook")
_in_flight: set[str] = set()  # event ids queued or being delivered by this process (bounds the executor's queue)
_in_flight_lock = threading.Lock()


def sandbox_link_token(*, order_id: int, customer_id: int, until: datetime) -> str:
    """The signed token of an order's sandbox page (``payments.links``: the order, its customer, its deadline)."""
    return links.link_sign(salt=LINK_SALT, order_id=order_id, customer_id=customer_id, until=until)


def sandbox_path(*, order_id: int, customer_id: int, until: datetime) -> str:
    return reverse(
        "payment-sandbox", args=[sandbox_link_token(order_id=order_id, customer_id=customer_id, until=until)]
    )


def payment_url(request: HttpRequest, order: OrderView) -> str | None:
    """Where the customer pays ``order`` (its ``payment_url``): the sandbox page while the order is pending and the
    sandbox is on, else None."""
    if not settings.PAYMENT_SANDBOX or order.status != Order.Status.PENDING_PAYMENT:
        return None
    if order.payment_expires_at is None:
        return None
    path = sandbox_path(order_id=order.order_id, customer_id=order.customer_id, until=order.payment_expires_at)
    if settings.PUBLIC_BASE_URL:
        return settings.PUBLIC_BASE_URL.rstrip("/") + path
    return request.build_absolute_uri(path)


def _order_from_link(token: str) -> Order:
    link = links.link_read(token, salt=LINK_SALT)
    if link.expired(now=db_now()):
        raise Http404("expired sandbox link")
    order = Order.objects.filter(pk=link.order_id, customer_id=link.customer_id).first()
    if order is None:
        raise Http404("no such order")
    return order


def _deliver(url: str, body: bytes, signature: str) -> None:
    # The URL is the fixed PAYMENT_SANDBOX_WEBHOOK_URL setting (an http(s) address of this service's webhook).
    request = urllib.request.Request(  # noqa: S310
        url, data=body, method="POST", headers={"Content-Type": "application/json", "X-Signature": signature}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            logger.info("sandbox webhook delivered: %s %s", response.status, response.read()[:200])
    except Exception:
        logger.exception("sandbox webhook delivery failed")


def _dispatch(url: str, body: bytes, signature: str, event_id: str) -> bool:
    """Queue one delivery on the executor unless this process already has ``event_id`` queued or in flight."""
    with _in_flight_lock:
        if event_id in _in_flight:
            return False
        _in_flight.add(event_id)

    def run() -> None:
        try:
            _deliver(url, body, signature)
        finally:
            with _in_flight_lock:
                _in_flight.discard(event_id)

    _EXECUTOR.submit(run)
    return True


def _why_nothing_to_send(order: Order, event_id: str) -> str | None:
    """None when a press may send ``event_id``; else what the page says instead."""
    if order.status != Order.Status.PENDING_PAYMENT:
        return f"Nothing sent: this order is already {order.status}."
    if order.payment_expires_at is None or order.payment_expires_at <= db_now():
        return "Nothing sent: the payment window of this order has closed."
    event = ProcessedEvent.objects.filter(event_id=event_id).first()
    if event is not None:
        return f"Nothing sent: this button was pressed before (outcome: {event.outcome or 'being applied'})."
    return None


def _render(request: HttpRequest, order: Order, status: int = 200, **context: object) -> HttpResponse:
    attempts = order.payment_attempts.order_by("id")
    return render(request, "payments/sandbox.html", {"order": order, "attempts": attempts, **context}, status=status)


def sandbox_page(request: HttpRequest, token: str) -> HttpResponse:
    if not settings.PAYMENT_SANDBOX:
        raise Http404("sandbox disabled")
    order = _order_from_link(token)
    if request.method == "POST":
        action = request.POST.get("action")
        event_type = {"pay": services.EVENT_SUCCEEDED, "fail": services.EVENT_FAILED}.get(action or "")
        if event_type is None:
            return render(request, "payments/sandbox.html", {"order": order, "error": "Unknown action."}, status=400)
        if not settings.PAYMENT_WEBHOOK_SECRET:
            # The webhook would refuse an unsigned event; say so here instead of failing silently in a log.
            error = "PAYMENT_WEBHOOK_SECRET is not set, so the sandbox cannot sign a webhook. Nothing was sent."
            return render(request, "payments/sandbox.html", {"order": order, "error": error}, status=409)
        event_id = f"sandbox-{order.pk}-{action}"
        refusal = _why_nothing_to_send(order, event_id)
        if refusal is not None:
            return _render(request, order, status=409, error=refusal)
        body = json.dumps(
            {
                "event_id": event_id,
                "type": event_type,
                "order_id": order.pk,
                "amount": str(order.total),
                "currency": order.currency,
                "provider_reference": f"sandbox-{order.pk}",
            }
        ).encode()
        signature = signing.sign(body=body, secret=settings.PAYMENT_WEBHOOK_SECRET)
        url = settings.PAYMENT_SANDBOX_WEBHOOK_URL
        _dispatch(url, body, signature, event_id)  # already queued here: the same event, nothing more to send
        return HttpResponseRedirect(reverse("payment-sandbox", args=[token]) + f"?sent={action}")
    return _render(request, order, sent=request.GET.get("sent"))
