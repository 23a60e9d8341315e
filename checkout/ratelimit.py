"""The checkout's rate limit (``CHECKOUT_RATE_LIMIT``): counted per customer by
``checkout.services.checkout_place``, before the checkout's transaction (a checkout of items without a key that the
sold-out memory refuses is answered before it, uncounted)."""

from django.conf import settings
from django.contrib.auth.models import User

from checkout.exceptions import RateLimited
from skincare import services as skincare_services
from skincare.validation import parse_rate


def checkout_rate_limit(*, customer: User) -> None:
    """Count this checkout against CHECKOUT_RATE_LIMIT (off when empty): one upsert in its own transaction, so it
    counts even when the checkout is then refused (a bot hammering a sold-out product is limited too: every attempt
    that reaches the database counts; one the sold-out memory refuses takes nothing, asks nothing and is not
    counted)."""
    rate = parse_rate(settings.CHECKOUT_RATE_LIMIT)
    if rate is None:
        return
    limit, window = rate
    retry_after = skincare_services.rate_limit_hit(
        scope="checkout", subject=str(customer.pk), limit=limit, window_seconds=window
    )
    if retry_after is not None:
        raise RateLimited(retry_after_seconds=retry_after, limit=settings.CHECKOUT_RATE_LIMIT)
