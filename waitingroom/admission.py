"""The checkout's admission check (docs/queue.md#checkout): the one call the checkout makes into the waiting room.

:func:`admission_use` runs inside the checkout's transaction, after the sale-window check and before anything is
written. For each product of the checkout that has a queue, one statement marks the customer's admitted, unlapsed
pass ``used``; a product with no such pass refuses the checkout (409 ``admission_required`` or 410
``admission_expired``). The row it updates is the customer's own pass, already serialised by the customer's
checkout lock (step 3 of docs/locking.md): no other customer's checkout ever waits for it, and the advancer
never updates an admitted pass. A checkout refused later (stock, limits) rolls the use back with everything else,
so the admission stays valid until it lapses. The checkout calls it only for the products its quote read found
queued (``checkout.services.QUOTES_SQL``): a product without a queue costs no statement here.
"""

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection

from waitingroom.exceptions import AdmissionExpired, AdmissionRequired, AdmissionUnitsExceeded, AdmissionUsed
from waitingroom.selectors import EXPIRED, NO_PASS, PASS_OWN_STATE_SQL, USED, WAITING, poll_after_seconds

# One round trip: the products of the checkout that have a queue, the use of the customer's admission for each
# (an admitted, unused pass whose admitted_until is still ahead by the transaction's clock), and the pass as it was
# for the ones that could not be used (its state before this statement: PASS_OWN_STATE_SQL, or NO_PASS).
ADMISSION_USE_SQL = f"""
WITH queued AS (
    SELECT q.product_id, q.admit_per_second, q.paused, q.admitted_through
      FROM product_queues q WHERE q.product_id = ANY(%(product_ids)s::bigint[])
), used AS (
    UPDATE queue_passes qp SET used_at = now()
      FROM queued
     WHERE qp.product_id = queued.product_id AND qp.customer_id = %(customer_id)s
       AND qp.admitted_at IS NOT NULL AND qp.used_at IS NULL AND qp.admitted_until > now()
    RETURNING qp.product_id
)
SELECT queued.product_id, used.product_id IS NOT NULL AS used,
       CASE WHEN qp.id IS NULL THEN '{NO_PASS}' ELSE {PASS_OWN_STATE_SQL} END AS pass_state,
       qp.position, queued.admitted_through, queued.admit_per_second, queued.paused
  FROM queued
  LEFT JOIN used ON used.product_id = queued.product_id
  LEFT JOIN queue_passes qp ON qp.product_id = queued.product_id AND qp.customer_id = %(customer_id)s
 ORDER BY queued.product_id
"""


def admission_use(*, customer: User, quantities: dict[int, int]) -> None:
    """Use the customer's admission for every product of the checkout that has a queue, or refuse the checkout:
    410 ``admission_expired`` if one lapsed, else 409 ``admission_required`` (with where to queue and a
    Retry-After, so a keyed checkout refused before its admission is not stored). Call it inside the checkout's
    transaction. ``quantities``: the units of each queued product the checkout asks for; more than
    QUEUE_UNITS_PER_ADMISSION of one is refused first (409 ``admission_units_exceeded``, the admission kept)."""
    too_many = sorted(pid for pid, qty in quantities.items() if qty > settings.QUEUE_UNITS_PER_ADMISSION)
    if too_many:
        raise AdmissionUnitsExceeded(product_ids=too_many, max_units=settings.QUEUE_UNITS_PER_ADMISSION)
    with connection.cursor() as cursor:
        cursor.execute(ADMISSION_USE_SQL, {"customer_id": customer.pk, "product_ids": sorted(quantities)})
        rows = cursor.fetchall()
    refused = [row for row in rows if not row[1]]
    if not refused:
        return
    expired = [row[0] for row in refused if row[2] == EXPIRED]
    if expired:
        raise AdmissionExpired(product_ids=expired)
    used = [row[0] for row in refused if row[2] == USED]
    if len(used) == len(refused):
        raise AdmissionUsed(product_ids=used)  # final: nothing to wait for
    waits = [
        poll_after_seconds(ahead=max(0, position - through - 1), pace=pace, paused=paused)
        for _pid, _used, state, position, through, pace, paused in refused
        if state == WAITING and position is not None
    ]
    raise AdmissionRequired(
        product_ids=[row[0] for row in refused],
        queue_urls=[f"/v1/products/{row[0]}/queue" for row in refused],
        pass_states=[row[2] for row in refused],
        # No placed waiting pass: a pass placed at the next advance (P_min), or no pass at all (join first: P_max).
        retry_after_seconds=max(
            waits,
            default=settings.QUEUE_POLL_MIN_SECONDS
            if any(row[2] == WAITING for row in refused)
            else settings.QUEUE_POLL_MAX_SECONDS,
        ),
    )
