"""OpenAPI descriptions of the waiting room's endpoints; applied to the views in waitingroom/api.py."""

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers

from skincare.openapi import BUSY, INTERNAL, UNAUTHORIZED, UNAVAILABLE, error
from waitingroom.models import PassState


class PassSerializer(serializers.Serializer):
    pass_id = serializers.IntegerField()
    product_id = serializers.IntegerField()
    state = serializers.ChoiceField(
        choices=PassState.values,
        help_text="waiting: not admitted yet; admitted: check out before `admitted_until`; used: a checkout used "
        "the admission; expired: it lapsed unused and the turn went to the next in line; sold_out: no unit is left "
        "and none can come back (or the sale ended): stop polling.",
    )
    position = serializers.IntegerField(
        allow_null=True,
        help_text="Place in line (1 = first). Null before the opening (everyone who joins before it is placed in a "
        "random order at the opening) and for a moment after a join (placed at the next advance).",
    )
    ahead = serializers.IntegerField(allow_null=True, help_text="Passes ahead of this one not yet admitted.")
    eta_seconds = serializers.IntegerField(
        allow_null=True, help_text="Estimated seconds to admission at the current pace; null while paused."
    )
    poll_after = serializers.IntegerField(
        allow_null=True,
        help_text="Seconds to wait before the next GET; grows with `ahead` (docs/queue.md#polling). Null when the "
        "state is final or admitted.",
    )
    admitted_until = serializers.DateTimeField(
        allow_null=True, help_text="While admitted: check out before this time (database clock, UTC)."
    )
    paused = serializers.BooleanField(help_text="Ops paused admission; the pass keeps its place.")
    admit_per_second = serializers.IntegerField(help_text="The queue's pace.")
    units_may_return = serializers.BooleanField(
        help_text="Waiting while no unit is available but some are reserved by unpaid orders: units that come "
        "back admit the next in line."
    )


class JoinedPassSerializer(PassSerializer):
    pass_token = serializers.CharField(
        help_text="The signed pass (also set as the cookie queue_pass_<pass_id>): send it with every poll, in the "
        "`Queue-Pass` header, and a waiting pass is answered without the database. Signed, not encrypted."
    )
    poll_url = serializers.CharField(help_text="Where to poll: `/v1/queue/passes/<pass_id>`.")
    poll_header = serializers.CharField(help_text="The header to send `pass_token` in: `Queue-Pass`.")


PRODUCT_ID = OpenApiParameter("product_id", int, OpenApiParameter.PATH, description="The product's id.")
PASS_ID = OpenApiParameter("pass_id", int, OpenApiParameter.PATH, description="The pass's id.")
NOT_FOUND = error(
    "No such product (`product_not_found`), the product sells without a queue, or no pass of yours "
    "(`queue_not_found`; another customer's pass looks the same).",
    "product_not_found",
    "queue_not_found",
)

QUEUE_JOIN = extend_schema(
    operation_id="queue_join",
    summary="Join the product's queue (one pass per customer)",
    description=(
        "Answered by the web process from the queue's counters; the pass is written with its process's next batch "
        "(QUEUE_JOIN_FLUSH_MS) or at its first poll through the database. A new pass is 201; a later call answered "
        "by the same process answers the same pass (200), also under concurrent calls; a customer's pass from "
        "another process is reconciled at its poll (one pass per customer is kept, at the earlier arrival's place). "
        "Everyone who joins before `sale_starts_at` is placed in a uniformly random order at the opening; later "
        "joiners are placed behind them in arrival order. Refusals write nothing."
    ),
    parameters=[PRODUCT_ID],
    request=None,
    responses={
        200: OpenApiResponse(JoinedPassSerializer, description="The pass this process answered the customer before."),
        201: OpenApiResponse(JoinedPassSerializer, description="Pass created."),
        401: UNAUTHORIZED,
        404: NOT_FOUND,
        409: error(
            "The queue opens QUEUE_OPENS_BEFORE_SECONDS before the sale (`queue_not_open`: `opens_at`, Retry-After), "
            "or no unit is available and none is reserved (`sold_out`).",
            "queue_not_open",
            "sold_out",
        ),
        410: error("The product's sale window has closed.", "sale_ended"),
        503: BUSY,
        500: INTERNAL,
    },
    tags=["queue"],
)
QUEUE_PASS_FOR_PRODUCT = extend_schema(
    operation_id="queue_pass_for_product",
    summary="The customer's pass for a product (poll it)",
    description="One indexed read, no lock. Poll again after `poll_after` seconds.",
    parameters=[PRODUCT_ID],
    responses={200: PassSerializer, 401: UNAUTHORIZED, 404: NOT_FOUND, 503: UNAVAILABLE, 500: INTERNAL},
    tags=["queue"],
)
QUEUE_PASS = extend_schema(
    operation_id="queue_pass",
    summary="A pass by its id (poll it)",
    description="The same body as the product's queue GET. Another customer's pass is a 404. With the signed pass "
    "(`Queue-Pass` header or the join's cookie) a waiting pass is answered from the pass and the queue's counters "
    "(at most QUEUE_COUNTERS_MAX_AGE_SECONDS old), without the database; when the answer places the pass, or "
    "answers the customer's pass kept instead of this one (its `pass_id`), it carries a new `pass_token`. A signed "
    "pass the database lacks (its process died before writing it) is written from the signed pass.",
    parameters=[
        PASS_ID,
        OpenApiParameter("Queue-Pass", str, OpenApiParameter.HEADER, required=False, description="The signed pass."),
    ],
    responses={
        200: PassSerializer,
        401: UNAUTHORIZED,
        403: error("The signed pass is forged, altered or not yours.", "queue_pass_invalid"),
        404: NOT_FOUND,
        410: error(
            "The signed pass is of the product's earlier queue (since reset): join again.", "queue_pass_outdated"
        ),
        503: UNAVAILABLE,
        500: INTERNAL,
    },
    tags=["queue"],
)
