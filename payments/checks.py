"""Start-up checks of the payment settings (Django system checks; the WSGI application runs them before serving)."""

from typing import Any

from django.conf import settings
from django.core import checks


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
