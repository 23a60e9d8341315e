"""Start-up checks of the payment settings (Django system checks; the WSGI application runs them before serving)."""

from typing import Any

from django.conf import settings
from django.core import checks

from skincare import demo
from skincare.checks import PRODUCTION_TAG, weak_secret


@checks.register()
def webhook_secret(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Without a secret every webhook would be refused with 401: fail at start-up instead, where it is seen. A shop
    whose gateway is Midtrans or Xendit takes its payments through that gateway's notification endpoint (verified by
    its own key or token): without a secret its generic webhook stays off, refusing every event."""
    if not settings.PAYMENT_WEBHOOK_SECRET and settings.PAYMENT_GATEWAY == "sandbox":
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


MIDTRANS_SANDBOX_HOSTS = ("app.sandbox.midtrans.com", "api.sandbox.midtrans.com")


@checks.register()
def midtrans_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """With PAYMENT_GATEWAY=midtrans the server key must be set; in production it must not be a published value,
    neither Midtrans's sandbox (its URLs, an `SB-` key) unless MIDTRANS_ALLOW_SANDBOX says so (a staging shop), and
    both base URLs must be https:// (the server key travels with every call)."""
    if settings.PAYMENT_GATEWAY != "midtrans":
        return []
    key = settings.MIDTRANS_SERVER_KEY
    if not key:
        return [
            checks.Error(
                "PAYMENT_GATEWAY is midtrans but MIDTRANS_SERVER_KEY is empty: no payment page could be opened and "
                "every notification would be refused.",
                hint="Set MIDTRANS_SERVER_KEY to the server key of your Midtrans account (Settings > Access Keys).",
                id="payments.E006",
            )
        ]
    errors = []
    if settings.SHOP_CURRENCY != "IDR":
        errors.append(
            checks.Error(
                f"PAYMENT_GATEWAY is midtrans but SHOP_CURRENCY is {settings.SHOP_CURRENCY}: Snap charges whole "
                "rupiah (IDR) only.",
                hint="Set SHOP_CURRENCY=IDR, or use another gateway.",
                id="payments.E009",
            )
        )
    if not settings.PRODUCTION:
        return errors
    if demo.is_published(key):
        errors.append(
            checks.Error(
                "MIDTRANS_SERVER_KEY is a published demo/test value: anyone can sign a Midtrans notification with it.",
                hint="Set MIDTRANS_SERVER_KEY to your account's server key.",
                id="payments.E007",
            )
        )
    urls = (settings.MIDTRANS_SNAP_BASE_URL, settings.MIDTRANS_API_BASE_URL)
    sandbox = key.startswith("SB-") or any(host in url for url in urls for host in MIDTRANS_SANDBOX_HOSTS)
    if sandbox and not settings.MIDTRANS_ALLOW_SANDBOX:
        errors.append(
            checks.Error(
                "Midtrans's sandbox (its base URLs or an SB- server key) with DJANGO_ENV=production: no real money.",
                hint="Set MIDTRANS_SNAP_BASE_URL=https://app.midtrans.com, MIDTRANS_API_BASE_URL=https://api.midtrans.com "
                "and the production server key, or MIDTRANS_ALLOW_SANDBOX=true on a staging shop.",
                id="payments.E008",
            )
        )
    plain = [url for url in urls if not url.lower().startswith("https://")]
    if plain:
        errors.append(
            checks.Error(
                f"A Midtrans base URL is not https:// ({', '.join(plain)}): every call sends the server key as its "
                "HTTP Basic user, in clear over plain HTTP.",
                hint="Set MIDTRANS_SNAP_BASE_URL and MIDTRANS_API_BASE_URL to Midtrans's https:// addresses.",
                id="payments.E010",
            )
        )
    return errors


@checks.register()
def xendit_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """With PAYMENT_GATEWAY=xendit the secret key and the callback token must be set and the shop must sell in
    rupiah; in production neither may be a published value and the API's address must be https:// (the secret key
    travels with every call)."""
    if settings.PAYMENT_GATEWAY != "xendit":
        return []
    missing = [name for name in ("XENDIT_SECRET_KEY", "XENDIT_CALLBACK_TOKEN") if not getattr(settings, name)]
    if missing:
        return [
            checks.Error(
                f"PAYMENT_GATEWAY is xendit but {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} empty: "
                "no invoice could be opened, or every callback would be refused.",
                hint="Set XENDIT_SECRET_KEY (Settings > API Keys) and XENDIT_CALLBACK_TOKEN (Settings > Webhooks: the "
                "verification token) of your Xendit account.",
                id="payments.E011",
            )
        ]
    errors = []
    if settings.SHOP_CURRENCY != "IDR":
        errors.append(
            checks.Error(
                f"PAYMENT_GATEWAY is xendit but SHOP_CURRENCY is {settings.SHOP_CURRENCY}: the shop charges its "
                "invoices in whole rupiah (IDR) only.",
                hint="Set SHOP_CURRENCY=IDR, or use another gateway.",
                id="payments.E009",
            )
        )
    if not settings.PRODUCTION:
        return errors
    published = [
        name for name in ("XENDIT_SECRET_KEY", "XENDIT_CALLBACK_TOKEN") if demo.is_published(getattr(settings, name))
    ]
    if published:
        errors.append(
            checks.Error(
                f"{' and '.join(published)} {'is a' if len(published) == 1 else 'are'} published demo/test "
                f"value{'' if len(published) == 1 else 's'}: anyone could call Xendit as the shop or post a callback.",
                hint="Set them to your Xendit account's secret key and callback verification token.",
                id="payments.E012",
            )
        )
    if not settings.XENDIT_API_BASE_URL.lower().startswith("https://"):
        errors.append(
            checks.Error(
                f"XENDIT_API_BASE_URL is not https:// ({settings.XENDIT_API_BASE_URL}): every call sends the secret "
                "key as its HTTP Basic user, in clear over plain HTTP.",
                hint="Set XENDIT_API_BASE_URL=https://api.xendit.co (the default).",
                id="payments.E013",
            )
        )
    return errors


@checks.register()
def queue_pace_within_page_pace(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """A queue admits buyers at its pace and each admitted buyer asks for one payment page: a pace above
    PAYMENT_SESSIONS_PER_SECOND would grow a line for pages that only the reservations' end empties. At or below it,
    pages keep up with admissions (docs/runbooks/payments.md#pace-the-payment-pages); each queue's own pace is held
    to the same bound where it is set (``waitingroom.services``)."""
    rate = settings.PAYMENT_SESSIONS_PER_SECOND
    if settings.PAYMENT_GATEWAY == "sandbox" or not rate or rate >= settings.QUEUE_ADMIT_PER_SECOND:
        return []
    return [
        checks.Error(
            f"QUEUE_ADMIT_PER_SECOND ({settings.QUEUE_ADMIT_PER_SECOND}) is above PAYMENT_SESSIONS_PER_SECOND ({rate}): "
            "a sale would admit buyers faster than the gateway's payment pages can be created for them, and the last "
            "ones could lose their reservation waiting for a page.",
            hint=f"Set QUEUE_ADMIT_PER_SECOND to at most {rate} (or unset it: its default follows the page rate).",
            id="payments.E014",
        )
    ]
