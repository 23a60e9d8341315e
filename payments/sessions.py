"""Payment sessions at the configured gateway (``payments.gateway``): where the buyer pays, the gateway's
notifications, the sweeper's question before it cancels, and reconciliation.

No call to the gateway is made inside a database transaction or on the checkout's path: the checkout's
``payment_url`` points at this service (:func:`payment_url`), and the buyer's visit there creates the gateway's
session once (:func:`payment_session_open`, stored in ``payment_sessions``) and is sent on to it. A session ends the
gateway's expiry margin (``MIDTRANS_EXPIRY_MARGIN_SECONDS``, ``XENDIT_EXPIRY_MARGIN_SECONDS``) before the order's
deadline by the database clock, so the gateway cannot take money for a reservation that is over. Nothing here asks
which gateway it talks to: what differs lives in each gateway's module (``payments.gateway``).
"""

import concurrent.futures
import dataclasses
import json
import logging
import math
import secrets
import time
import uuid
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any, cast

from django.conf import settings
from django.db import connection, transaction
from django.http import Http404, HttpRequest
from django.urls import reverse

from orders.exceptions import OrderNotFound, OrderNotPending
from orders.models import Order
from orders.selectors import OrderView
from payments import gateway, links, sandbox, services
from payments.exceptions import (
    AmountNotChargeable,
    GatewayRateLimited,
    GatewayUnavailable,
    InvalidSignature,
    PaymentPagesPaced,
    PaymentWindowClosing,
)
from payments.gateway import Gateway
from payments.midtrans import MidtransGateway
from payments.models import PaymentStatus
from payments.xendit import XenditGateway
from skincare.db import retry_transient
from skincare.locks import advisory_xact_lock

logger = logging.getLogger(__name__)

LINK_SALT = "payments.sessions.link"
# What a gateway notification whose status moves no money answers (pending, challenged, refunded): nothing recorded.
IGNORED = "ignored"


def configured_gateway() -> Gateway:
    """The gateway ``PAYMENT_GATEWAY`` names (settings refuse any other value at start-up)."""
    if settings.PAYMENT_GATEWAY == "midtrans":
        return MidtransGateway.from_settings()
    if settings.PAYMENT_GATEWAY == "xendit":
        return XenditGateway.from_settings()
    return gateway.SandboxGateway()


def gateway_pages() -> bool:
    """Whether buyers pay on a gateway's pages (Midtrans, Xendit), not the sandbox's built-in one."""
    return settings.PAYMENT_GATEWAY != "sandbox"


def payment_url(request: HttpRequest, order: OrderView) -> str | None:
    """Where the customer pays ``order`` (its ``payment_url``), while it is pending: with a gateway this service's
    signed link that opens (or reuses) the gateway's page; with the sandbox its page (``payments.sandbox``)."""
    if not gateway_pages():
        return sandbox.payment_url(request, order)
    if order.status != Order.Status.PENDING_PAYMENT:
        return None
    if order.payment_expires_at is None:
        return None
    token = links.link_sign(
        salt=LINK_SALT, order_id=order.order_id, customer_id=order.customer_id, until=order.payment_expires_at
    )
    path = reverse("payment-pay", args=[token])
    if settings.PUBLIC_BASE_URL:
        return settings.PUBLIC_BASE_URL.rstrip("/") + path
    return request.build_absolute_uri(path)


def link_claims(token: str) -> links.Link:
    """The order, customer and deadline of a signed payment link (``payments.links``); 404 when forged or altered
    (:func:`payment_session_open` refuses it once expired)."""
    return links.link_read(token, salt=LINK_SALT)


# The order as a session needs it, with the database's clock (autocommit: its own short transaction).
ORDER_FOR_SESSION_SQL = """
SELECT o.status, o.payment_expires_at, o.total, o.currency, now(), s.redirect_url
FROM orders o LEFT JOIN payment_sessions s ON s.order_id = o.id
WHERE o.id = %s AND o.customer_id = %s
"""
# Claim the order's session (one visit creates it): a new row, or a claim left empty by a visit that died more than
# twice the gateway's timeout ago. Returns the order id when this visit holds the claim. Each claim is one attempt,
# with its own gateway order id (payments.models.PaymentSession.gateway_order_id), recorded in the same statement
# among the ids the shop issued (gateway_transactions), before the gateway hears of it: a notification naming it
# can then always be matched.
CLAIM_SESSION_SQL = """
WITH claim AS (
    INSERT INTO payment_sessions (order_id, gateway, ends_at, gateway_order_id) VALUES (%s, %s, %s, %s)
    ON CONFLICT (order_id) DO UPDATE SET created_at = now(), ends_at = EXCLUDED.ends_at,
                                         gateway_order_id = EXCLUDED.gateway_order_id
        WHERE payment_sessions.redirect_url = ''
          AND payment_sessions.created_at < now() - make_interval(secs => %s)
    RETURNING order_id, gateway, gateway_order_id
)
INSERT INTO gateway_transactions (gateway_order_id, order_id, gateway)
SELECT gateway_order_id, order_id, gateway FROM claim
RETURNING order_id
"""
STORED_SESSION_SQL = "SELECT redirect_url FROM payment_sessions WHERE order_id = %s"
STORE_SESSION_SQL = "UPDATE payment_sessions SET token = %s, redirect_url = %s WHERE order_id = %s"
RELEASE_CLAIM_SQL = "DELETE FROM payment_sessions WHERE order_id = %s AND redirect_url = ''"
# The order a gateway transaction id belongs to: only an id this shop issued names an order.
ISSUED_ORDER_SQL = "SELECT order_id FROM gateway_transactions WHERE gateway_order_id = %s"
# The order's gateway transactions not yet known closed, but one (the attempt being made now), oldest first.
OPEN_TRANSACTIONS_SQL = """
SELECT gateway_order_id FROM gateway_transactions
 WHERE order_id = %s AND closed_at IS NULL AND gateway_order_id <> %s
 ORDER BY created_at, gateway_order_id
"""
CLOSE_TRANSACTION_SQL = "UPDATE gateway_transactions SET closed_at = now() WHERE gateway_order_id = %s"
ORDER_STATUS_SQL = "SELECT status FROM orders WHERE id = %s"


# Payment-page turns (PAYMENT_SESSIONS_PER_SECOND), one spacing apart on the gateway's row
# (payments.models.SessionPace: its next free turn), so every web process shares one exact pace. A visit with no
# turn books the next free one: now when the gateway is idle (no credit accrues while idle, so no burst ever exceeds
# the rate), else the first after every turn booked before it, kept for its order (payments.models.SessionTurn) and
# answered with the wait. So refused visits are not herded back at the same instant: each returns at its own turn,
# in the order they came, and its visit then creates the page without booking again; a visit more than
# TURN_LATE_SECONDS after its turn was away, and books again (using the old turn now would bunch with the turns booked
# after it). One statement, alone in its own
# transaction: the gateway's row, then the order's turn. The clock is the database's as the statement runs
# (clock_timestamp(): a booking that waited for the row measures from then).
SESSION_TURN_BOOK_SQL = """
WITH held AS (
    SELECT turn_at FROM payment_session_turns
     WHERE order_id = %(order)s AND turn_at > clock_timestamp() - make_interval(secs => %(late)s)
), booked AS (
    INSERT INTO payment_session_pace AS p (gateway, next_at)
    SELECT %(gateway)s, clock_timestamp() + make_interval(secs => %(spacing)s) WHERE NOT EXISTS (SELECT FROM held)
    ON CONFLICT (gateway) DO UPDATE
        SET next_at = greatest(p.next_at, clock_timestamp()) + make_interval(secs => %(spacing)s)
    RETURNING next_at - make_interval(secs => %(spacing)s) AS turn_at
), later AS (
    SELECT turn_at, extract(epoch FROM turn_at - clock_timestamp())::float AS wait FROM booked
), kept AS (
    INSERT INTO payment_session_turns (order_id, turn_at)
    SELECT %(order)s, turn_at FROM later WHERE wait > 0
    ON CONFLICT (order_id) DO UPDATE SET turn_at = EXCLUDED.turn_at
)
SELECT extract(epoch FROM turn_at - clock_timestamp())::float, true FROM held
UNION ALL
SELECT wait, false FROM later
"""
TURN_LATE_SECONDS = 2  # a waiting page comes back at its turn, a client reading Retry-After within a second of it
# A booked turn that has come is spent by the visit that uses it (one page attempt per turn).
SESSION_TURN_SPEND_SQL = "DELETE FROM payment_session_turns WHERE order_id = %s"
# A gateway's 429: no page before its wait is over, in any process; every booked turn moves on by the same wait.
SESSION_PACE_BACK_OFF_SQL = """
INSERT INTO payment_session_pace AS p (gateway, next_at)
VALUES (%(gateway)s, clock_timestamp() + make_interval(secs => %(wait)s))
ON CONFLICT (gateway) DO UPDATE SET next_at = greatest(p.next_at, clock_timestamp()) + make_interval(secs => %(wait)s)
"""
SESSION_TURNS_BACK_OFF_SQL = """
UPDATE payment_session_turns SET turn_at = greatest(turn_at, clock_timestamp()) + make_interval(secs => %(wait)s)
"""


def session_turn_take(gw: Gateway, *, order_id: int) -> float | None:
    """Take the order's payment-page turn: its booked turn once it has come (and not more than TURN_LATE_SECONDS
    ago), or the gateway's next free one when the gateway is idle; return the seconds it was due ago (None: not paced, when PAYMENT_SESSIONS_PER_SECOND is 0).
    Otherwise book the order's turn (the first after every turn booked before it) and refuse with 503
    payment_pages_paced and the seconds until it (``Retry-After``)."""
    rate = settings.PAYMENT_SESSIONS_PER_SECOND
    if not rate:
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            SESSION_TURN_BOOK_SQL,
            {"order": order_id, "gateway": gw.name, "spacing": 1 / rate, "late": TURN_LATE_SECONDS},
        )
        wait, held = cursor.fetchone()
        if wait > 0:
            raise PaymentPagesPaced(order_id=order_id, turn_in_ms=math.ceil(wait * 1000), retry_after_seconds=wait)
        if held:
            cursor.execute(SESSION_TURN_SPEND_SQL, [order_id])
    return -wait


def session_pace_back_off(gw: Gateway, *, wait_seconds: int) -> None:
    """The gateway refused a page for its rate limit: no process creates one before ``wait_seconds`` are over, and
    every booked turn moves on by as much (the gateway's row first, then the turns: the booking's order)."""
    if not settings.PAYMENT_SESSIONS_PER_SECOND:
        return
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(SESSION_PACE_BACK_OFF_SQL, {"gateway": gw.name, "wait": wait_seconds})
        cursor.execute(SESSION_TURNS_BACK_OFF_SQL, {"wait": wait_seconds})


def session_ends_at(gw: Gateway, *, payment_expires_at: datetime) -> datetime:
    """When an order's gateway session must end: the gateway's safety margin before its deadline."""
    return payment_expires_at - gw.expiry_margin


def payment_session_open(*, link: links.Link) -> str:
    """The gateway page of a customer's pending order: the stored one, or a new one created now (outside any
    transaction, bounded by the gateway's timeout) and stored. Refuses an order that is not pending (409
    order_not_pending), has less than the margin and the gateway's shortest page left (409 payment_window_closing)
    or a total the gateway cannot charge (409 amount_not_chargeable: both charge whole rupiah); a visit whose turn
    has not come (:func:`session_turn_take`) is 503 payment_pages_paced, and a gateway that does not answer is 503
    gateway_unavailable: both leave the reservation as it is. Only with a gateway (the sandbox
    links to its own page), and a ``link`` (:func:`link_claims`) not expired: 404 otherwise."""
    if not gateway_pages():
        raise Http404("this shop's payment pages are the sandbox's")
    gw = configured_gateway()
    order_id = link.order_id
    with connection.cursor() as cursor:
        cursor.execute(ORDER_FOR_SESSION_SQL, [order_id, link.customer_id])
        row = cursor.fetchone()
    if row is None:
        raise OrderNotFound(order_id=order_id)
    status, expires_at, total, currency, now, stored_url = row
    if link.expired(now=now):
        raise Http404("expired payment link")
    if status != Order.Status.PENDING_PAYMENT:
        raise OrderNotPending(order_id=order_id, status=status)
    if stored_url:
        return stored_url
    if total != total.to_integral_value():  # the gateways charge whole rupiah: never a rounded amount
        raise AmountNotChargeable(order_id=order_id)
    ends_at = session_ends_at(gw, payment_expires_at=expires_at)
    if ends_at - now < gw.shortest_session:
        raise PaymentWindowClosing(order_id=order_id)
    session_turn_take(gw, order_id=order_id)
    # A new gateway order id per attempt: an earlier attempt whose answer was lost may have created its transaction.
    gateway_order_id = f"{order_id}-{secrets.token_hex(4)}"
    with connection.cursor() as cursor:
        cursor.execute(CLAIM_SESSION_SQL, [order_id, gw.name, ends_at, gateway_order_id, 2 * gw.timeout])
        claimed = cursor.fetchone() is not None
    if not claimed:  # another visit created it a moment ago, or is creating it right now
        with connection.cursor() as cursor:
            cursor.execute(STORED_SESSION_SQL, [order_id])
            stored = cursor.fetchone()
        if stored is not None and stored[0]:
            return stored[0]
        raise GatewayUnavailable("The payment page is being prepared; retry shortly.")
    sending = False
    try:
        # One live transaction per order: every earlier attempt is known closed at the gateway first.
        _earlier_attempts_close(gw, order_id=order_id, keep=gateway_order_id)
        sending = True
        session = gw.session_create(
            order_id=order_id,
            gateway_order_id=gateway_order_id,
            amount=total,
            currency=currency,
            now=now,
            ends_at=ends_at,
        )
    except BaseException as exc:
        if isinstance(exc, GatewayRateLimited):
            session_pace_back_off(gw, wait_seconds=exc.retry_after)
        with connection.cursor() as cursor:
            cursor.execute(RELEASE_CLAIM_SQL, [order_id])
            if not sending or not getattr(exc, "sent", True):  # the gateway never heard of this attempt
                cursor.execute(CLOSE_TRANSACTION_SQL, [gateway_order_id])
        raise
    with connection.cursor() as cursor:
        cursor.execute(STORE_SESSION_SQL, [session.token, session.redirect_url, order_id])
    return session.redirect_url


@dataclasses.dataclass(frozen=True)
class Closed:
    """What closing one gateway transaction found: the gateway's word (``absent`` or a ``payments.gateway`` status)
    and, for settled money, the outcome of applying it."""

    word: str
    outcome: str | None = None


NOT_ASKED = object()  # _transaction_close's "ask the gateway yourself" (None is an answer: no such transaction)


def _transaction_close(
    gw: Gateway, *, order_id: int, gateway_order_id: str, source: str, asked: object = NOT_ASKED
) -> Closed:
    """Ask the gateway about one of the order's transactions (unless ``asked`` is its answer already) and close it:
    absent, failed or refunded there → closed; still open → expired there, then closed; settled → its money applied
    to the order (``status_apply``: taken before the deadline, since every page closes before it), then closed. No
    answer raises GatewayUnavailable and leaves it open (asked again next time)."""
    status = (
        gw.status_get(gateway_order_id=gateway_order_id)
        if asked is NOT_ASKED
        else cast(gateway.TransactionStatus | None, asked)
    )
    closed = Closed("absent" if status is None else status.status)
    if status is not None and status.status == gateway.OPEN:
        gw.transaction_expire(gateway_order_id=gateway_order_id)
    elif status is not None and status.status == gateway.SETTLED:
        outcome = status_apply(order_id=order_id, status=status, payload={"source": source}, settled_in_time=True)
        closed = Closed(status.status, outcome)
    with connection.cursor() as cursor:
        cursor.execute(CLOSE_TRANSACTION_SQL, [gateway_order_id])
    return closed


def _earlier_attempts_close(gw: Gateway, *, order_id: int, keep: str) -> None:
    """Before a new attempt is created: close every earlier transaction of the order (an attempt given up on may
    have been created at the gateway). One settled there paid the order: no new page (409 order_not_pending)."""
    with connection.cursor() as cursor:
        cursor.execute(OPEN_TRANSACTIONS_SQL, [order_id, keep])
        earlier = [row[0] for row in cursor.fetchall()]
    for gateway_order_id in earlier:
        closed = _transaction_close(gw, order_id=order_id, gateway_order_id=gateway_order_id, source="payment page")
        if closed.word == gateway.SETTLED:  # the caller closes ``keep``, which was never sent
            with connection.cursor() as cursor:
                cursor.execute(ORDER_STATUS_SQL, [order_id])
                raise OrderNotPending(order_id=order_id, status=cursor.fetchone()[0])


def session_close_after_cancel(*, order_id: int) -> None:
    """After a cancel has committed (the customer's, the admin's Cancel action, ``flash_sale_setup``'s): close every
    gateway transaction of the order not yet known closed, so no page can take money for a cancelled order (bounded;
    no answer → the session is marked for reconcile_payments)."""
    if not gateway_pages():
        return
    with connection.cursor() as cursor:
        cursor.execute(OPEN_TRANSACTIONS_SQL, [order_id, ""])
        open_ids = [row[0] for row in cursor.fetchall()]
    gw = configured_gateway()
    for gateway_order_id in open_ids:
        try:
            gw.transaction_expire(gateway_order_id=gateway_order_id)
        except GatewayUnavailable:
            logger.warning("the gateway did not answer the expiry of cancelled order %s", order_id)
            _mark_for_reconciliation(order_id)
            return
        with connection.cursor() as cursor:
            cursor.execute(CLOSE_TRANSACTION_SQL, [gateway_order_id])


def _event_id(status: gateway.TransactionStatus) -> str:
    """One gateway state of one transaction is one event: however often it is notified, it is applied once."""
    return f"{configured_gateway().name}-{status.transaction_id or status.gateway_order_id}-{status.gateway_status}"


def status_apply(
    *, order_id: int, status: gateway.TransactionStatus, payload: Any = None, settled_in_time: bool = False
) -> str:
    """Apply the gateway's word on a transaction of ``order_id`` through the webhook's one service
    (``payment_event_apply``): settled → the payment event, failed → a failed attempt, anything else changes
    nothing (``ignored``)."""
    if status.status == gateway.SETTLED:
        event_type = services.EVENT_SUCCEEDED
    elif status.status == gateway.FAILED:
        event_type = services.EVENT_FAILED
    else:
        return IGNORED
    return services.payment_event_apply(
        event_id=_event_id(status),
        event_type=event_type,
        order_id=order_id,
        amount=status.amount,
        currency=status.currency,
        provider_reference=status.transaction_id,
        payload=payload,
        settled_in_time=settled_in_time,
    )


def issued_order(*, gateway_order_id: str) -> int | None:
    """The order a transaction id this shop issued belongs to (``gateway_transactions``); None for any other id."""
    with connection.cursor() as cursor:
        cursor.execute(ISSUED_ORDER_SQL, [gateway_order_id])
        row = cursor.fetchone()
    return None if row is None else row[0]


def notification_apply(*, gateway_name: str, body: bytes, headers: Mapping[str, str]) -> tuple[int | None, str]:
    """A notification posted to ``gateway_name``'s endpoint: refused (401) unless that is the configured gateway;
    verified by it (401 otherwise, nothing changes), confirmed with the gateway's status API
    (money is recorded from that answer only; no answer → 503, so the gateway retries), matched to the order whose
    transaction id it names (only an id the shop issued: ``gateway_transactions``), applied once. Money for an id
    the shop did not issue pays no order: it is recorded for ops (``unmatched``, order id None). Returns the order
    id and the outcome."""
    gw = configured_gateway()
    if gw.name != gateway_name:
        raise InvalidSignature(f"{gateway_name} notifications are not enabled here (PAYMENT_GATEWAY is {gw.name}).")
    gateway_order_id = gw.notification_read(body=body, headers=headers)
    status = gw.status_get(gateway_order_id=gateway_order_id)
    if status is None:
        raise GatewayUnavailable(f"The gateway has no transaction {gateway_order_id} yet.")
    order_id = issued_order(gateway_order_id=gateway_order_id)
    if order_id is None:
        if status.status != gateway.SETTLED:
            return None, IGNORED
        outcome = services.unmatched_payment_record(
            event_id=_event_id(status),
            gateway=gw.name,
            gateway_order_id=gateway_order_id,
            transaction_id=status.transaction_id,
            gateway_status=status.gateway_status,
            amount=status.amount,
            currency=status.currency,
            payload=json.loads(body),
        )
        return None, outcome
    return order_id, status_apply(order_id=order_id, status=status, payload=json.loads(body))


@dataclasses.dataclass
class SessionCheck:
    """What the sweeper's questions to the gateway found (``sessions_check_due``)."""

    due_by: datetime | None = None
    more: bool = False  # more due orders with a session than one check asks about: check again after the batches
    recovered: int = 0  # settled there: the lost notification applied
    expired: int = 0  # still open there: the gateway transaction expired before the order
    unreachable: int = 0  # no answer: the order expires anyway, marked for reconciliation
    elsewhere: list[int] = dataclasses.field(default_factory=list)  # due, leased to another sweeper: not ours to cancel


# A sweeper's lease on the gateway questions of up to %(limit)s due pending orders with a session that no live
# lease holds, oldest deadline first (with every order sharing the last one's deadline), for %(lease)s seconds:
# with each, its deadline, the database's clock and its gateway transactions not yet known closed. Runs after the
# sweepers' lease key (docs/locking.md, step 0), so it sees every lease taken before it.
DUE_SESSIONS_LEASE_SQL = """
WITH due AS (
    SELECT s.order_id, o.payment_expires_at FROM payment_sessions s JOIN orders o ON o.id = s.order_id
    WHERE o.status = %(pending)s AND o.payment_expires_at <= now()
      AND (s.sweep_lease_until IS NULL OR s.sweep_lease_until <= now())
), cut AS (
    SELECT max(payment_expires_at) AS last_deadline
    FROM (SELECT payment_expires_at FROM due ORDER BY payment_expires_at, order_id LIMIT %(limit)s) first
)
UPDATE payment_sessions s
   SET sweep_lease_until = now() + make_interval(secs => %(lease)s), sweep_lease_by = %(sweeper)s
  FROM due, cut
 WHERE s.order_id = due.order_id AND due.payment_expires_at <= cut.last_deadline
RETURNING s.order_id, due.payment_expires_at, now(),
          ARRAY(SELECT t.gateway_order_id FROM gateway_transactions t
                WHERE t.order_id = s.order_id AND t.closed_at IS NULL ORDER BY t.created_at, t.gateway_order_id)
"""
# The database's clock, and the due pending orders another sweeper's live lease holds: it asks about them, and it
# alone cancels them.
LEASED_ELSEWHERE_SQL = """
SELECT now(), ARRAY(
    SELECT s.order_id FROM payment_sessions s JOIN orders o ON o.id = s.order_id
    WHERE o.status = %(pending)s AND o.payment_expires_at <= now()
      AND s.sweep_lease_until > now() AND s.sweep_lease_by <> %(sweeper)s
    ORDER BY s.order_id)
"""
MARK_FOR_RECONCILIATION_SQL = "UPDATE payment_sessions SET needs_reconciliation = true WHERE order_id = %s"


def _mark_for_reconciliation(order_id: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(MARK_FOR_RECONCILIATION_SQL, [order_id])


Answer = gateway.TransactionStatus | GatewayUnavailable | None


def _statuses_ask(gw: Gateway, gateway_order_ids: list[str]) -> dict[str, Answer]:
    """The gateway's word on each transaction, asked ``GATEWAY_MAX_CALLS`` at a time (the boundary's bulkhead), all
    within ``GATEWAY_SWEEP_SECONDS``: a question not answered by then is GatewayUnavailable (a sweep during an
    outage ends on time; the questions still in flight end at their own deadline, their answers unused). Only HTTP
    runs on the threads: what an answer changes is applied by the caller, on its own connection."""
    answers: dict[str, Answer] = {}
    if not gateway_order_ids:
        return answers
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=settings.GATEWAY_MAX_CALLS, thread_name_prefix="sweep")
    futures = {pool.submit(gw.status_get, gateway_order_id=g): g for g in gateway_order_ids}
    done, _late = concurrent.futures.wait(futures, timeout=settings.GATEWAY_SWEEP_SECONDS)
    pool.shutdown(wait=False, cancel_futures=True)
    for future, gateway_order_id in futures.items():
        if future not in done:
            answers[gateway_order_id] = GatewayUnavailable("Not answered within the sweep's bound.")
            continue
        try:
            answers[gateway_order_id] = future.result()
        except GatewayUnavailable as exc:
            answers[gateway_order_id] = exc
    return answers


@retry_transient  # a lock wait past DB_LOCK_TIMEOUT_MS is ServiceBusy: a looping sweeper reports it, sweeps again
@transaction.atomic
def _due_sessions_lease(
    *, limit: int, sweeper: str
) -> tuple[list[tuple[int, datetime, list[str]]], datetime, list[int]]:
    """Lease the next due orders with a session for ``sweeper`` (:data:`DUE_SESSIONS_LEASE_SQL`, oldest deadline
    first), after the sweepers' lease key: returns them (order, deadline, open transactions), the database's clock,
    and the due orders another sweeper's live lease holds."""
    advisory_xact_lock(space="sweeper_lease", idents=[1])
    params: dict[str, str | int] = {
        "pending": Order.Status.PENDING_PAYMENT.value,
        "limit": limit,
        "lease": 2 * settings.GATEWAY_SWEEP_SECONDS,
        "sweeper": sweeper,
    }
    with connection.cursor() as cursor:
        cursor.execute(DUE_SESSIONS_LEASE_SQL, params)
        leased = [(order_id, deadline, open_ids) for order_id, deadline, _now, open_ids in cursor.fetchall()]
        cursor.execute(LEASED_ELSEWHERE_SQL, params)
        now, elsewhere = cursor.fetchone()
    leased.sort(key=lambda row: (row[1], row[0]))  # oldest deadline first
    return leased, now, elsewhere


def sessions_check_due(*, limit: int, sweeper: str | None = None) -> SessionCheck:
    """Before the sweeper cancels: ask the gateway about every transaction not yet known closed of every due pending
    order that has a session, outside any lock (autocommit), all at once up to the boundary's bulkhead and within the
    sweep's bound (:func:`_statuses_ask`). Settled → paid
    (the money was taken before the deadline: the session ended before it); still open → expired there first; no
    answer → marked for reconciliation. At most ``limit`` orders per check (with the ties of the last deadline), each
    leased to ``sweeper`` for twice the sweep's bound first, so two sweepers never ask about the same order;
    ``due_by`` is the instant up to which every due order with a session was asked about (the database time of the
    question, or the deadline of the last one asked when there were more), and ``elsewhere`` the due orders another
    sweeper is asking about: the sweeper's batches then claim only orders due by then and not elsewhere
    (``orders.services.orders_expire_due``), and with ``more`` it checks again."""
    if not gateway_pages():
        return SessionCheck()
    gw = configured_gateway()
    leased, now, elsewhere = _due_sessions_lease(limit=limit, sweeper=sweeper or uuid.uuid4().hex)
    if len(leased) < limit:
        check = SessionCheck(due_by=now, elsewhere=elsewhere)
    else:  # more are due: every order up to this deadline (its ties too) was leased; the sweeper checks again
        check = SessionCheck(due_by=leased[-1][1], more=True, elsewhere=elsewhere)
    answers = _statuses_ask(gw, [gateway_order_id for *_, open_ids in leased for gateway_order_id in open_ids])
    for order_id, _deadline, open_ids in leased:
        try:
            for gateway_order_id in open_ids:  # every transaction the order ever had that is not known closed
                answer = answers[gateway_order_id]
                if isinstance(answer, GatewayUnavailable):
                    raise answer
                closed = _transaction_close(
                    gw, order_id=order_id, gateway_order_id=gateway_order_id, source="sweeper", asked=answer
                )
                check.recovered += closed.outcome == services.Outcome.PAID
                check.expired += closed.word == gateway.OPEN
        except GatewayUnavailable:
            logger.warning("sweeper: the gateway did not answer about order %s; it expires unconfirmed", order_id)
            _mark_for_reconciliation(order_id)
            check.unreachable += 1
    return check


@dataclasses.dataclass(frozen=True)
class Mismatch:
    order_id: int
    kind: str  # refund_to_make, settled_not_recorded, paid_not_settled, amount_differs, unreachable
    detail: str


# The orders with a gateway session opened since a time, with what the shop recorded, every gateway transaction the
# order ever had, and the gateway's reference of the charge that paid it.
SESSIONS_SINCE_SQL = """
SELECT s.order_id, o.status, o.total, o.currency,
       ARRAY(SELECT t.gateway_order_id FROM gateway_transactions t
              WHERE t.order_id = s.order_id ORDER BY t.created_at, t.gateway_order_id),
       (SELECT a.provider_reference FROM payment_attempts a
         WHERE a.order_id = s.order_id AND a.status = %s ORDER BY a.id LIMIT 1)
FROM payment_sessions s JOIN orders o ON o.id = s.order_id
WHERE s.created_at >= %s AND o.status <> %s
ORDER BY s.order_id
"""


# The orders the gateway has now answered for, with nothing to mend: no longer to reconcile.
RECONCILED_SQL = (
    "UPDATE payment_sessions SET needs_reconciliation = false WHERE order_id = ANY(%s) AND needs_reconciliation"
)


# How many times reconciliation asks again about one transaction the gateway refused for its rate limit.
RATE_LIMITED_TRIES = 5


class CallPace:
    """One process's calls to the gateway spaced ``1 / PAYMENT_SESSIONS_PER_SECOND`` apart (not spaced when it is
    0), and none before a 429's wait is over: a command that asks about many orders (reconciliation) stays within
    the rate the account's pages are sized to. Paced on this process's monotonic clock: nothing here decides an
    expiry."""

    def __init__(self) -> None:
        rate = settings.PAYMENT_SESSIONS_PER_SECOND
        self.spacing = 1 / rate if rate else 0.0
        self.next_at = time.monotonic()

    def status_get(self, gw: Gateway, *, gateway_order_id: str) -> gateway.TransactionStatus | None:
        """``gw.status_get`` at this pace, asked again after the gateway's wait when it answers 429."""
        tries = 1
        while True:
            time.sleep(max(0.0, self.next_at - time.monotonic()))  # pacing: the gateway's rate, not a sync
            self.next_at = max(self.next_at, time.monotonic()) + self.spacing
            try:
                return gw.status_get(gateway_order_id=gateway_order_id)
            except GatewayRateLimited as exc:
                if tries == RATE_LIMITED_TRIES:
                    raise
                tries += 1
                self.next_at = time.monotonic() + (exc.retry_after or 1)


def payments_reconcile(*, since: datetime) -> list[Mismatch]:
    """Every order with a session opened since ``since`` and no longer pending, compared with the gateway's
    status of every transaction it ever had (one call each, through the gateway boundary; none inside a
    transaction): money settled there for a cancelled order, or for a paid one by another charge than the one that
    paid it, is a refund to make; a
    paid order with no settlement there, and a settlement of another amount, are mismatches too. An order the
    sweeper or a cancel marked for reconciliation (the gateway did not answer then) is unmarked once the gateway
    answered for every transaction and nothing is to mend; one with a mismatch stays marked, for a person. The calls
    are paced (:class:`CallPace`)."""
    gw = configured_gateway()
    pace = CallPace()
    with connection.cursor() as cursor:
        cursor.execute(SESSIONS_SINCE_SQL, [PaymentStatus.SUCCEEDED.value, since, Order.Status.PENDING_PAYMENT.value])
        rows = cursor.fetchall()
    mismatches: list[Mismatch] = []
    reconciled = []
    for order_id, status, total, currency, gateway_order_ids, paid_by in rows:
        try:
            statuses = [
                pace.status_get(gw, gateway_order_id=gateway_order_id) for gateway_order_id in gateway_order_ids
            ]
        except GatewayUnavailable as exc:
            mismatches.append(Mismatch(order_id, "unreachable", exc.message))
            continue
        wrong = _order_mismatches(order_id, status, Decimal(total), currency, statuses, paid_by)
        mismatches.extend(wrong)
        if not wrong:
            reconciled.append(order_id)
    with connection.cursor() as cursor:
        cursor.execute(RECONCILED_SQL, [reconciled])
    return mismatches


def _order_mismatches(
    order_id: int,
    status: str,
    total: Decimal,
    currency: str,
    statuses: list[gateway.TransactionStatus | None],
    paid_by: str | None,
) -> list[Mismatch]:
    """What the gateway's ``statuses`` of one order's transactions say is wrong here (nothing: it agrees)."""
    settled = [there for there in statuses if there is not None and there.status == gateway.SETTLED]
    if not settled:
        if status == Order.Status.PAID:
            words = [("no transaction" if there is None else there.gateway_status) for there in statuses]
            return [Mismatch(order_id, "paid_not_settled", f"paid here, {', '.join(words)} there")]
        return []
    mismatches = []
    # Money to return: every settlement of a cancelled order; of a paid one, every one but the charge that paid.
    paying = next((t for t in settled if status == Order.Status.PAID and t.transaction_id == paid_by), None)
    for there in settled:
        if there is paying:
            continue
        detail = f"settled there ({there.amount} {there.currency}, transaction {there.gateway_order_id})"
        mismatches.append(Mismatch(order_id, "refund_to_make", detail))
    for there in settled:
        if there.amount != total or there.currency != currency:
            detail = f"{there.amount} {there.currency} there, {total} {currency} here"
            mismatches.append(Mismatch(order_id, "amount_differs", detail))
    return mismatches
