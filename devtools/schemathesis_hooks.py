"""Schemathesis hooks for `make test`'s run against a live server (backoffice/tests/test_schemathesis.py): each
webhook request is signed as a gateway signs it, so the run reaches the webhook's own validation and outcomes.

Loaded by ``SCHEMATHESIS_HOOKS=devtools.schemathesis_hooks``; the secret is the server's ``PAYMENT_WEBHOOK_SECRET``
(the published load-test one, devtools.processes). The body is signed exactly as the transport serializes it
(``requests``: ``json.dumps(body, allow_nan=False)`` in UTF-8); a body it cannot serialize is left unsigned.
"""

import json
import os
from typing import Any

import schemathesis

from payments import signing

WEBHOOK_PATH = "/v1/payments/webhook"


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    if case.operation.path != WEBHOOK_PATH or case.body is None or isinstance(case.body, bytes):
        return
    try:
        body = json.dumps(case.body, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError):
        return
    headers = dict(case.headers or {})
    if "X-Signature" not in headers:  # left out on purpose (the missing-header check): the 401 is the answer
        return
    headers["X-Signature"] = signing.sign(body=body, secret=os.environ["PAYMENT_WEBHOOK_SECRET"])
    case.headers = headers


def lines_over_the_cap(body: Any, cap: int) -> bool:
    """True for a cart body whose lines are each valid but whose lines of one product add up to more than ``cap``
    units: the one rule of a checkout that JSON Schema cannot state (the document says it in words; the service
    answers 400)."""
    items = body.get("items") if isinstance(body, dict) else None
    if not isinstance(items, list):
        return False
    merged: dict[int, int] = {}
    for item in items:
        if not isinstance(item, dict):
            return False
        product_id, qty = item.get("product_id"), item.get("qty")
        if type(product_id) is not int or type(qty) is not int or not 0 < qty <= cap:
            return False
        merged[product_id] = merged.get(product_id, 0) + qty
    return any(total > cap for total in merged.values())


@schemathesis.hook
def filter_case(context: Any, case: Any) -> bool:
    """Generated cart bodies stay within the per-product cap across lines (CHECKOUT_MAX_QTY, given by the test)."""
    return not lines_over_the_cap(case.body, int(os.environ["CHECKOUT_MAX_QTY"]))
