"""The foundation's reads: who an API token belongs to."""

from django.contrib.auth.models import User
from django.db.models import Q

from skincare.db import TransactionNow
from skincare.models import ApiToken
from skincare.services import api_token_digest


def api_token_user(*, token: str) -> User | None:
    """The active user a live token belongs to, or None: one query on the unique digest index, joined with the
    user. Revoked tokens and tokens past ``expires_at`` (by the database's clock) do not authenticate."""
    rows = list(
        ApiToken.objects.select_related("user")
        .filter(digest=api_token_digest(token), revoked_at__isnull=True, user__is_active=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=TransactionNow()))
        .order_by()[:1]
    )
    return rows[0].user if rows else None
