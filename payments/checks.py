"""Start-up checks of the payment settings (Django system checks; the WSGI application runs them before serving)."""

from typing import Any

from django.conf import settings
from django.core import checks

from skincare import demo
from skincare.checks import PRODUCTION_TAG, weak_secret


@checks.register()
def webhook_secret(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Without a secret every webhook would be refused with 401: fail at start-up instead, where it is seen."""
    if not settings.PAYMENT_WEBHOOK_SECRET:
        return [
            checks.Error(
                "PAYMENT_WEBHOOK_SECRET is empty: every payment webhook would be refused.",
                hint="Set PAYMENT_WEBHOOK_SECRET to the secret shared with the payment gateway.",
                id="payments.E001",
            )
        ]
    return []


@checks.register()
def sandbox_only_in_development(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """The sandbox marks orders paid without money: it runs with DEBUG, or with the explicit demo opt-in."""
    if settings.PAYMENT_SANDBOX and not settings.DEBUG and not settings.PAYMENT_SANDBOX_ALLOW_WITHOUT_DEBUG:
        return [
            checks.Error(
                "PAYMENT_SANDBOX is on without DJANGO_DEBUG: the sandbox pays orders without money.",
                hint="Turn PAYMENT_SANDBOX off, or (demo machines only) set PAYMENT_SANDBOX_ALLOW_WITHOUT_DEBUG=true.",
                id="payments.E002",
            )
        ]
    return []


@checks.register(PRODUCTION_TAG)
def production_refuses_demo_payments(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """In production a published or weak webhook secret lets anyone mark orders paid, and the sandbox pays without
    money (whatever PAYMENT_SANDBOX_ALLOW_WITHOUT_DEBUG says)."""
    if not settings.PRODUCTION:
        return []
    errors = []
    if settings.PAYMENT_WEBHOOK_SECRET and demo.is_published(settings.PAYMENT_WEBHOOK_SECRET):
        errors.append(
            checks.Error(
                "PAYMENT_WEBHOOK_SECRET is a published demo/test value (it is in this repository): anyone can sign a "
                "payment.succeeded webhook with it.",
                hint="Set PAYMENT_WEBHOOK_SECRET to the secret your payment gateway gave you.",
                id="payments.E003",
            )
        )
    elif settings.PAYMENT_WEBHOOK_SECRET and (reason := weak_secret(settings.PAYMENT_WEBHOOK_SECRET)):
        errors.append(
            checks.Error(
                f"PAYMENT_WEBHOOK_SECRET is {reason}: a short secret can be guessed offline from one signed event.",
                hint="Set PAYMENT_WEBHOOK_SECRET to the secret your payment gateway gave you.",
                id="payments.E005",
            )
        )
    if settings.PAYMENT_SANDBOX:
        errors.append(
            checks.Error(
                "PAYMENT_SANDBOX is on with DJANGO_ENV=production: the sandbox pays orders without money.",
                hint="Unset PAYMENT_SANDBOX (and PAYMENT_SANDBOX_ALLOW_WITHOUT_DEBUG) in production.",
                id="payments.E004",
            )
        )
    return errors
