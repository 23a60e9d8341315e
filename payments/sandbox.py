"""A sandbox payment gateway for development (enabled only with ``PAYMENT_SANDBOX=true``).

``payment_url`` from checkout opens a page with *Pay* and *Fail* buttons. Pressing one makes this module
act like a gateway: it builds an event, signs it with ``PAYMENT_WEBHOOK_SECRET`` and POSTs it to this
service's own ``/v1/payments/webhook`` from a background thread (as a real gateway calls back on its own
schedule), so the newcomer's click walks exactly the path production payments take.
"""

import json
import logging
import threading
import urllib.request
import uuid

from django.conf import settings
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt

from orders.models import Order
from payments import services, signing

logger = logging.getLogger(__name__)


def payment_url(request, order):
    """The sandbox page of ``order`` (registered with ``orders.payment_links`` by ``PaymentsConfig.ready``)."""
    if not settings.PAYMENT_SANDBOX:
        return None
    path = reverse("payment-sandbox", args=[order.pk])
    if settings.PUBLIC_BASE_URL:
        return settings.PUBLIC_BASE_URL.rstrip("/") + path
    return request.build_absolute_uri(path)


def _deliver(url, body, signature):
    # The URL is this service's own webhook, built by reverse() from the incoming http(s) request.
    request = urllib.request.Request(  # noqa: S310
        url, data=body, method="POST", headers={"Content-Type": "application/json", "X-Signature": signature}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            logger.info("sandbox webhook delivered: %s %s", response.status, response.read()[:200])
    except Exception:
        logger.exception("sandbox webhook delivery failed")


@csrf_exempt
def sandbox_page(request, order_id):
    if not settings.PAYMENT_SANDBOX:
        raise Http404("sandbox disabled")
    order = Order.objects.filter(pk=order_id).first()
    if order is None:
        raise Http404("no such order")
    if request.method == "POST":
        action = request.POST.get("action")
        event_type = {"pay": services.EVENT_SUCCEEDED, "fail": services.EVENT_FAILED}.get(action)
        if event_type is None:
            return render(request, "payments/sandbox.html", {"order": order, "error": "Unknown action."}, status=400)
        if not settings.PAYMENT_WEBHOOK_SECRET:
            # The webhook would refuse an unsigned event; say so here instead of failing silently in a log.
            error = "PAYMENT_WEBHOOK_SECRET is not set, so the sandbox cannot sign a webhook. Nothing was sent."
            return render(request, "payments/sandbox.html", {"order": order, "error": error}, status=409)
        body = json.dumps(
            {
                "event_id": f"sandbox-{uuid.uuid4()}",
                "type": event_type,
                "order_id": order.pk,
                "amount": str(order.total),
                "provider_reference": f"sandbox-{order.pk}",
            }
        ).encode()
        signature = signing.sign(body=body, secret=settings.PAYMENT_WEBHOOK_SECRET)
        url = request.build_absolute_uri(reverse("payment-webhook"))
        threading.Thread(target=_deliver, args=(url, body, signature), daemon=True).start()
        return HttpResponseRedirect(reverse("payment-sandbox", args=[order.pk]) + f"?sent={action}")
    return render(
        request,
        "payments/sandbox.html",
        {"order": order, "sent": request.GET.get("sent"), "attempts": order.payment_attempts.order_by("id")},
    )
