"""Every environment variable the product reads, declared once: its name, its default as docs/configuration.md
shows it, what it means, and the section of that doc it appears in. ``python -m devtools.docgen`` writes the doc's
tables from these declarations (``make docs``), and ``skincare/tests/test_generated_docs.py`` fails when a variable
the code reads is not declared here, when a declared one is not read, or when the committed doc differs from what
would be generated.

Documentation only: the settings (``config/settings.py``), gunicorn's conf and ``config/modes.py`` read the
environment themselves, and nothing at run time imports this module. The texts are Markdown that lands in
docs/configuration.md, so a relative link is relative to docs/.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Variable:
    name: str
    # As the doc shows it: a value in backticks, or what happens when it is unset.
    default: str
    meaning: str
    # The heading (``## `` or ``### ``) of docs/configuration.md under which its row stands: one of SECTIONS.
    section: str


# The headings of docs/configuration.md's generated part, in order; each is followed by the table of its variables
# (a heading without variables, such as the operator's group, stands above its ``### `` subsections).
OPERATOR = "## What an operator sets"
PRODUCTION_SECTION = "### Production and secrets"
DATABASE = "### Database"
WEB_SERVER_AND_LOGS = "### Web server and logs"
THE_SALE = "### The sale"
KEY_ROTATION = "## While the secret key rotates"
PAYMENT_GATEWAY = "## Payment gateway ([payments runbook](runbooks/payments.md))"
LIMITS = "## Limits, retention and abuse (the defaults suit most shops)"
DEVELOPMENT = "## Development and tests only"
SECTIONS = (
    OPERATOR,
    PRODUCTION_SECTION,
    DATABASE,
    WEB_SERVER_AND_LOGS,
    THE_SALE,
    KEY_ROTATION,
    PAYMENT_GATEWAY,
    LIMITS,
    DEVELOPMENT,
)

VARIABLES = (
    # Production and secrets
    Variable(
        "DJANGO_ENV",
        default="unset = `production`",
        meaning="`production` or `development`, nothing else. Production: DEBUG off, secret key and hosts required, secure cookies, HSTS, HTTPS redirect, `.env` not read, Django's deployment checks and the demo refused at every start-up ([operations](operations.md#how-production-is-switched-on)). only the process environment selects it, never `.env`; `make run` and `make test` ask for `development` unless the environment names a mode; the image sets `production`",
        section=PRODUCTION_SECTION,
    ),
    Variable(
        "DJANGO_SECRET_KEY",
        default="none: required",
        meaning="signs sessions, CSRF tokens, queue passes, payment links and known-device cookies. Production refuses every published value (`skincare.E002`) and a key Django's deployment check calls weak (`skincare.E020`)",
        section=PRODUCTION_SECTION,
    ),
    Variable(
        "DJANGO_ALLOWED_HOSTS",
        default="development: `127.0.0.1,localhost,testserver`; production: required",
        meaning="comma-separated host names the shop answers to",
        section=PRODUCTION_SECTION,
    ),
    Variable(
        "DJANGO_CSRF_TRUSTED_ORIGINS",
        default="none",
        meaning="comma-separated origins allowed to post the admin's forms from another origin",
        section=PRODUCTION_SECTION,
    ),
    Variable(
        "DJANGO_SECURE_PROXY_SSL_HEADER",
        default="unset",
        meaning="e.g. `HTTP_X_FORWARDED_PROTO` behind a TLS-terminating proxy (which must set it and strip it from clients, as [the shipped front](operations.md#the-front-haproxy) does)",
        section=PRODUCTION_SECTION,
    ),
    Variable(
        "TRUSTED_PROXIES",
        default="none",
        meaning="comma-separated CIDRs of your reverse proxies: from them the client address (admin login throttle, `/metrics`' loopback rule) is the right-most `X-Forwarded-For` entry that is not a trusted proxy; a range not inside a private or loopback network (10/8, 172.16/12, 192.168/16, 127/8, fc00::/7, ::1) is warning `skincare.W010`, refused in production (`skincare.E013`); requests with `X-Forwarded-For` while it is empty log one warning per process",
        section=PRODUCTION_SECTION,
    ),
    Variable(
        "METRICS_TOKEN",
        default="unset",
        meaning="`/metrics` and the sweeper's `--metrics-port` answer `Authorization: Bearer <token>` from anywhere; without it loopback clients only, and nobody in production; production refuses a published or short one (`skincare.E011`)",
        section=PRODUCTION_SECTION,
    ),
    Variable(
        "PAYMENT_WEBHOOK_SECRET",
        default="unset: start-up error `payments.E001` (with `PAYMENT_GATEWAY=midtrans` or `xendit`: the generic webhook refuses every event)",
        meaning="HMAC key shared with the payment gateway; production refuses published values (`payments.E003`) and weak ones (`payments.E005`)",
        section=PRODUCTION_SECTION,
    ),
    Variable(
        "PUBLIC_BASE_URL",
        default="from the request",
        meaning="base of `payment_url`",
        section=PRODUCTION_SECTION,
    ),
    # Database
    Variable(
        "DATABASE_URL",
        default="none: required (`make db` writes the embedded server's to `.env`)",
        meaning="any PostgreSQL ≥ 14, e.g. `postgres://user:pass@host:5432/shop`",
        section=DATABASE,
    ),
    Variable(
        "DB_PGBOUNCER",
        default="`false`",
        meaning="`DATABASE_URL` points at PgBouncer in transaction mode: no libpq `options` startup parameter (PgBouncer refuses it); every statement is bounded by the role's timeouts in the database, which `migrate` sets (start-up check `skincare.E014`), and each service transaction also sets them with `SET LOCAL`",
        section=DATABASE,
    ),
    Variable(
        "DB_PREPARED_STATEMENTS",
        default="`true` directly, `false` with `DB_PGBOUNCER=true`",
        meaning="server-side prepared statements; whether the connection can keep them is the deployment's fact: `false` for client-side binding behind any transaction-mode pooler; `true` with `DB_PGBOUNCER=true` refuses to start",
        section=DATABASE,
    ),
    Variable(
        "DB_CONN_MAX_AGE",
        default="`60`",
        meaning="seconds a worker keeps its database connection (persistent connections; `0` = one per request)",
        section=DATABASE,
    ),
    Variable(
        "DB_LOCK_TIMEOUT_MS",
        default="`5000`",
        meaning="the longest wait for a row lock; exceeded → `503 busy` with `Retry-After`",
        section=DATABASE,
    ),
    Variable(
        "DB_STATEMENT_TIMEOUT_MS",
        default="`15000`",
        meaning="the longest statement; both timeouts must stay below `GUNICORN_TIMEOUT` (warning `skincare.W001`)",
        section=DATABASE,
    ),
    # Web server and logs
    Variable(
        "HOST",
        default="`127.0.0.1` (`0.0.0.0` in the image)",
        meaning="the address gunicorn binds",
        section=WEB_SERVER_AND_LOGS,
    ),
    Variable(
        "PORT",
        default="`8000`",
        meaning="the port gunicorn binds; the sandbox posts its webhook to it",
        section=WEB_SERVER_AND_LOGS,
    ),
    Variable(
        "WEB_CONCURRENCY",
        default="cores + 1",
        meaning="gunicorn's workers (processes)",
        section=WEB_SERVER_AND_LOGS,
    ),
    Variable(
        "GUNICORN_TIMEOUT",
        default="`30`",
        meaning="seconds before gunicorn kills a stuck worker: the request's outer time budget ([reliability](reliability.md))",
        section=WEB_SERVER_AND_LOGS,
    ),
    Variable(
        "LOG_LEVEL",
        default="`INFO`",
        meaning="`DEBUG`, `INFO`, `WARNING`, `ERROR` or `CRITICAL`, for the application and gunicorn",
        section=WEB_SERVER_AND_LOGS,
    ),
    Variable(
        "LOG_FORMAT",
        default="`json`",
        meaning="`json` (one object per line, with request ids) or `plain`",
        section=WEB_SERVER_AND_LOGS,
    ),
    Variable(
        "ACCESS_LOG",
        default="`true`",
        meaning="one access line per request (logger `skincare.access`); off when a proxy's access log already has it",
        section=WEB_SERVER_AND_LOGS,
    ),
    # The sale
    Variable(
        "SHOP_CURRENCY",
        default="`IDR`",
        meaning="the shop's ISO 4217 currency: every order is written in it; a payment event in another one is a `currency_mismatch` (`skincare.E012` unless three capital letters)",
        section=THE_SALE,
    ),
    Variable(
        "RESERVATION_TTL_SECONDS",
        default="`1800`",
        meaning="how long a checkout holds stock before the sweeper cancels the unpaid order",
        section=THE_SALE,
    ),
    Variable(
        "MAX_PENDING_ORDERS_PER_CUSTOMER",
        default="`5` (`0` = no cap)",
        meaning="open unpaid orders per customer",
        section=THE_SALE,
    ),
    Variable(
        "CHECKOUT_RATE_LIMIT",
        default="empty (no limit)",
        meaning="checkouts per customer per fixed window, e.g. `20/minute` (`skincare.E001` when malformed); a checkout the sold-out memory refuses is not counted",
        section=THE_SALE,
    ),
    Variable(
        "QUEUE_ADMIT_PER_SECOND",
        default="`10`, or `PAYMENT_SESSIONS_PER_SECOND` when that is lower",
        meaning="a queued product's default pace; each queue may set its own ([queue](queue.md)); with a gateway, above `PAYMENT_SESSIONS_PER_SECOND` refuses to start (`payments.E014`) and a queue's own pace above it is refused where it is set",
        section=THE_SALE,
    ),
    Variable(
        "QUEUE_OPENS_BEFORE_SECONDS",
        default="`3600`",
        meaning="how long before the sale a product's queue opens for joining",
        section=THE_SALE,
    ),
    Variable(
        "ADMISSION_TTL_SECONDS",
        default="`120`",
        meaning="how long an admission lasts",
        section=THE_SALE,
    ),
    Variable(
        "QUEUE_UNITS_PER_ADMISSION",
        default="`2`",
        meaning="the most units of a queued product one admission buys",
        section=THE_SALE,
    ),
    # While the secret key rotates
    Variable(
        "DJANGO_SECRET_KEY_FALLBACKS",
        default="none",
        meaning="earlier keys, comma-separated, newest first, while the key rotates ([runbook](runbooks/access.md#rotate-the-secret-key)): what they signed is still accepted, nothing new is signed with them. An empty entry refuses to start; production refuses a published (`skincare.E002`) or weak (`skincare.E020`) one",
        section=KEY_ROTATION,
    ),
    # Payment gateway ([payments runbook](runbooks/payments.md))
    Variable(
        "PAYMENT_GATEWAY",
        default="`sandbox`",
        meaning="`sandbox` (the built-in page, `PAYMENT_SANDBOX`), `midtrans` (Snap) or `xendit` (Invoices); with either gateway rupiah only (`SHOP_CURRENCY=IDR`, else `payments.E009`) and whole rupiah only: while it is the gateway a price or sale price with a fraction is refused where it is set, and an older order whose total has one gets `409 amount_not_chargeable`, never a rounded charge; anything else refuses to start",
        section=PAYMENT_GATEWAY,
    ),
    Variable(
        "MIDTRANS_SERVER_KEY",
        default="none: required with `midtrans` (`payments.E006`)",
        meaning="signs Midtrans's calls (HTTP Basic user) and verifies its notifications; production refuses a published one (`payments.E007`)",
        section=PAYMENT_GATEWAY,
    ),
    Variable(
        "MIDTRANS_SNAP_BASE_URL",
        default="`https://app.sandbox.midtrans.com`",
        meaning="Snap (`https://app.midtrans.com` in production)",
        section=PAYMENT_GATEWAY,
    ),
    Variable(
        "MIDTRANS_API_BASE_URL",
        default="`https://api.sandbox.midtrans.com`",
        meaning="status and expire calls (`https://api.midtrans.com` in production)",
        section=PAYMENT_GATEWAY,
    ),
    Variable(
        "MIDTRANS_ALLOW_SANDBOX",
        default="`false`",
        meaning="production accepts Midtrans's sandbox URLs or an `SB-` key (a staging shop); refused otherwise (`payments.E008`); a base URL that is not `https://` is refused in production whatever this says (`payments.E010`: the server key travels with every call)",
        section=PAYMENT_GATEWAY,
    ),
    Variable(
        "MIDTRANS_TIMEOUT_SECONDS",
        default="`5`",
        meaning="the deadline of every call to Midtrans, whole: DNS, connect, TLS, the request and every read (payment page: `503 gateway_unavailable`)",
        section=PAYMENT_GATEWAY,
    ),
    Variable(
        "GATEWAY_MAX_CALLS",
        default="half `WEB_THREADS`",
        meaning="calls to the gateway one process may have in flight (those given up on count until they end); one more is refused at once with `503 gateway_unavailable` (`payments.boundary`); below `WEB_THREADS` or the shop refuses to start, so a stalled gateway never holds every thread of a worker",
        section=PAYMENT_GATEWAY,
    ),
    Variable(
        "GATEWAY_BREAKER_FAILURES",
        default="`5`",
        meaning="after this many gateway calls in a row failed, the process stops asking the gateway for `GATEWAY_BREAKER_SECONDS`",
        section=PAYMENT_GATEWAY,
    ),
    Variable(
        "GATEWAY_BREAKER_SECONDS",
        default="`30`",
        meaning="how long an open breaker answers every call at once (`503 gateway_unavailable`, `Retry-After` = the seconds left); then one call tries again",
        section=PAYMENT_GATEWAY,
    ),
    Variable(
        "GATEWAY_SWEEP_SECONDS",
        default="`30`",
        meaning="a sweep asks the gateway about all its due orders at once (`GATEWAY_MAX_CALLS` at a time) and waits at most this long for every answer; an order still unanswered expires unconfirmed and is marked for `reconcile_payments`",
        section=PAYMENT_GATEWAY,
    ),
    Variable(
        "MIDTRANS_EXPIRY_MARGIN_SECONDS",
        default="`180` (at least 60)",
        meaning="a Snap session ends this long before the order's `payment_expires_at`; less left: `409 payment_window_closing`",
        section=PAYMENT_GATEWAY,
    ),
    Variable(
        "PAYMENT_SESSIONS_PER_SECOND",
        default="`8` with `xendit` (its published limit is 10/s), `10` with `midtrans` (it publishes none), `0` with `sandbox`",
        meaning="payment pages created per second across every web process, one at a time at even spacing ([runbook](runbooks/payments.md#pace-the-payment-pages)): a visit that must wait books a turn of its own and gets `503 payment_pages_paced` with the milliseconds to it, never the gateway's 429; `reconcile_payments` asks no faster; `0`: not paced",
        section=PAYMENT_GATEWAY,
    ),
    Variable(
        "XENDIT_SECRET_KEY",
        default="none: required with `xendit` (`payments.E011`)",
        meaning="Xendit's secret API key: the HTTP Basic user of every call; production refuses a published one (`payments.E012`)",
        section=PAYMENT_GATEWAY,
    ),
    Variable(
        "XENDIT_CALLBACK_TOKEN",
        default="none: required with `xendit` (`payments.E011`)",
        meaning="the account's callback verification token: a callback whose `x-callback-token` differs is refused (`401 invalid_signature`); production refuses a published one (`payments.E012`)",
        section=PAYMENT_GATEWAY,
    ),
    Variable(
        "XENDIT_API_BASE_URL",
        default="`https://api.xendit.co`",
        meaning="the Invoice API; production refuses one that is not `https://` (`payments.E013`: the secret key travels with every call)",
        section=PAYMENT_GATEWAY,
    ),
    Variable(
        "XENDIT_TIMEOUT_SECONDS",
        default="`5`",
        meaning="the deadline of every call to Xendit, whole: DNS, connect, TLS, the request and every read (payment page: `503 gateway_unavailable`)",
        section=PAYMENT_GATEWAY,
    ),
    Variable(
        "XENDIT_EXPIRY_MARGIN_SECONDS",
        default="`180` (at least 60)",
        meaning="an invoice ends this long before the order's `payment_expires_at` (its `invoice_duration` counted from the database clock); less left: `409 payment_window_closing`",
        section=PAYMENT_GATEWAY,
    ),
    # Limits, retention and abuse (the defaults suit most shops)
    Variable(
        "WEB_THREADS",
        default="`4`",
        meaning="the requests each worker serves at once (gunicorn's threads, at least 2); the front sends an instance at most `WEB_CONCURRENCY` × `WEB_THREADS`",
        section=LIMITS,
    ),
    Variable(
        "CHECKOUT_MAX_ITEMS",
        default="`20`",
        meaning="lines per checkout (`/v1/schema`'s `maxItems`)",
        section=LIMITS,
    ),
    Variable(
        "CHECKOUT_MAX_QTY",
        default="`100`",
        meaning="units of one product per checkout (its lines added up); `/v1/schema` states it as each line's `maximum`",
        section=LIMITS,
    ),
    Variable(
        "REQUEST_MAX_BODY_BYTES",
        default="`2621440`",
        meaning="a larger request body is `413 payload_too_large` before it is read",
        section=LIMITS,
    ),
    Variable(
        "CART_TTL_SECONDS",
        default="`1800`",
        meaning="a cart expires this long after its last change (`410 cart_expired` after); it holds no stock",
        section=LIMITS,
    ),
    Variable(
        "CART_RETENTION_SECONDS",
        default="`86400`",
        meaning="expired and checked-out carts answer 410 / 409 this long, then they are pruned",
        section=LIMITS,
    ),
    Variable(
        "MAX_OPEN_CARTS_PER_CUSTOMER",
        default="`10` (`0` = no cap)",
        meaning="open carts per customer; another is `409 too_many_open_carts`",
        section=LIMITS,
    ),
    Variable(
        "QUEUE_MAX_BURST_SECONDS",
        default="`2`",
        meaning="the most one advance of a queue admits, in seconds of its pace",
        section=LIMITS,
    ),
    Variable(
        "QUEUE_POLL_MIN_SECONDS",
        default="`1`",
        meaning="the shortest `poll_after` of a pass",
        section=LIMITS,
    ),
    Variable(
        "QUEUE_POLL_MAX_SECONDS",
        default="`ADMISSION_TTL_SECONDS / 2 − QUEUE_COUNTERS_MAX_AGE_SECONDS − QUEUE_POLL_MIN_SECONDS` (`58`)",
        meaning="the longest `poll_after`; `2 × (max + counters' age + min)` at most `ADMISSION_TTL_SECONDS` (the default is the longest that allows)",
        section=LIMITS,
    ),
    Variable(
        "PRODUCT_READ_MAX_AGE_SECONDS",
        default="`1`",
        meaning="how old the public product page's stock and sale state may be: its `Cache-Control: max-age` and each process's memory of the read (`0`: read every time; never a checkout's)",
        section=LIMITS,
    ),
    Variable(
        "QUEUE_COUNTERS_MAX_AGE_SECONDS",
        default="`1`",
        meaning="how old a process's copy of the queues' counters may be ([the join](queue.md#joining) and [the signed pass's poll](queue.md#polling))",
        section=LIMITS,
    ),
    Variable(
        "QUEUE_JOIN_FLUSH_MS",
        default="`200`",
        meaning="how often each web process writes the joins it answered, all of them together ([joining](queue.md#joining)); `0`: each join is written in its own request",
        section=LIMITS,
    ),
    Variable(
        "IDEMPOTENCY_KEY_TTL_SECONDS",
        default="`86400`",
        meaning="how long an `Idempotency-Key`'s answer is kept",
        section=LIMITS,
    ),
    Variable(
        "IDEMPOTENCY_MAX_STORED_REFUSALS",
        default="`100`",
        meaning="refusals kept under keys per customer (older ones are forgotten)",
        section=LIMITS,
    ),
    Variable(
        "PROCESSED_EVENTS_RETENTION_DAYS",
        default="`30`",
        meaning="how long an applied webhook event id is remembered",
        section=LIMITS,
    ),
    Variable(
        "PAYMENT_WEBHOOK_TOLERANCE_SECONDS",
        default="`300`",
        meaning="the webhook signature's timestamp window",
        section=LIMITS,
    ),
    Variable(
        "API_TOKEN_TTL_SECONDS",
        default="unset (no expiry)",
        meaning="lifetime of newly issued API tokens",
        section=LIMITS,
    ),
    Variable(
        "API_TOKEN_CACHE_SECONDS",
        default="`300` (`0` = off)",
        meaning="the longest a worker remembers a valid token. Revocations reach every worker through the database within about a second ([tokens](reliability.md#tokens)); this bounds the case the feed would miss (a revoking transaction held open over 30 s)",
        section=LIMITS,
    ),
    Variable(
        "ADMIN_LOGIN_MAX_FAILURES",
        default="`5`",
        meaning="admin login failures for one username from one address within the window → 429",
        section=LIMITS,
    ),
    Variable(
        "ADMIN_LOGIN_MAX_FAILURES_PER_ADDRESS",
        default="`20`",
        meaning="failures from one address, any usernames",
        section=LIMITS,
    ),
    Variable(
        "ADMIN_LOGIN_MAX_FAILURES_UNKNOWN_ADDRESS",
        default="`20`",
        meaning="failures from requests without a readable client address",
        section=LIMITS,
    ),
    Variable(
        "ADMIN_LOGIN_MAX_FAILURES_PER_USERNAME",
        default="`100`",
        meaning="failures for one username from everywhere (blocks only addresses that failed themselves)",
        section=LIMITS,
    ),
    Variable(
        "ADMIN_LOGIN_WINDOW_SECONDS",
        default="`900`",
        meaning="the admin login throttle's window",
        section=LIMITS,
    ),
    Variable(
        "MIGRATION_LOCK_TIMEOUT_MS",
        default="`1000`",
        meaning="`manage.py migrate`'s longest wait for each lock: a schema change gives up instead of queueing checkouts behind it ([deploys runbook](runbooks/deploys.md#apply-a-migration-during-a-sale))",
        section=LIMITS,
    ),
    Variable(
        "MIGRATION_ATTEMPTS",
        default="`10`",
        meaning="how many times `migrate` runs when a lock was refused (the refused migration was rolled back)",
        section=LIMITS,
    ),
    Variable(
        "MIGRATION_RETRY_PAUSE_MS",
        default="`2000`",
        meaning="the pause between two of those attempts",
        section=LIMITS,
    ),
    Variable(
        "MIGRATION_STATEMENT_TIMEOUT_MS",
        default="`0`",
        meaning="`migrate`'s longest statement (`0`: none; a concurrent index build takes as long as the table)",
        section=LIMITS,
    ),
    Variable(
        "DB_TRANSIENT_RETRIES",
        default="`3`",
        meaning="re-runs of a transaction that lost a deadlock or serialization race",
        section=LIMITS,
    ),
    Variable(
        "INVENTORY_OPTIMISTIC_ATTEMPTS",
        default="`5`",
        meaning="attempts of a checkout of an `optimistic` product before `409 stock_conflict`",
        section=LIMITS,
    ),
    Variable(
        "DB_SLOW_TRANSACTION_MS",
        default="`1000`",
        meaning="a slower service transaction logs a warning (logger `skincare.db.slow`)",
        section=LIMITS,
    ),
    Variable(
        "DJANGO_SECURE_SSL_REDIRECT",
        default="`true`",
        meaning="production: redirect plain HTTP to HTTPS (the probes and `/metrics` are exempt)",
        section=LIMITS,
    ),
    Variable(
        "DJANGO_SECURE_HSTS_SECONDS",
        default="`31536000`",
        meaning="production: HSTS max-age",
        section=LIMITS,
    ),
    Variable(
        "DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS",
        default="`true`",
        meaning="production: HSTS for every subdomain",
        section=LIMITS,
    ),
    Variable(
        "DJANGO_SECURE_HSTS_PRELOAD",
        default="`true`",
        meaning="production: HSTS preload",
        section=LIMITS,
    ),
    Variable(
        "RELEASE_ID",
        default="unset (no header)",
        meaning="the release this process runs (a commit, an image tag; letters, digits and `. _ + -`, at most 64, else it refuses to start): every answer names it in `X-Release`, so a client sees a rolling release arrive ([deploys runbook](runbooks/deploys.md#roll-a-release))",
        section=LIMITS,
    ),
    Variable(
        "PROMETHEUS_MULTIPROC_DIR",
        default="a private directory per gunicorn master",
        meaning="where the workers' metric files live (emptied at start)",
        section=LIMITS,
    ),
    # Development and tests only
    Variable(
        "DJANGO_DEBUG",
        default="`false`",
        meaning="Django's debug mode (never in production)",
        section=DEVELOPMENT,
    ),
    Variable(
        "DJANGO_DEV_INSECURE_SECRET_KEY",
        default="`false`",
        meaning="without `DJANGO_SECRET_KEY`, use a fixed public development key (type checking, tools)",
        section=DEVELOPMENT,
    ),
    Variable(
        "DJANGO_READ_DOT_ENV_FILE",
        default="`true` (`false` in the test suite)",
        meaning="read `.env` in development (with `false`, not even its `DJANGO_ENV` line is checked)",
        section=DEVELOPMENT,
    ),
    Variable(
        "DATABASE_TEST_NAME",
        default="`test_` + the database's name",
        meaning="the test database",
        section=DEVELOPMENT,
    ),
    Variable(
        "SOLD_OUT_CACHE_MS",
        default="`250`",
        meaning="a worker refuses a product it saw sold out this recently without a query; `250` is the measured choice ([decisions](benchmarks.md#decisions)), `0` turns it off (the test suite, so a test that restocks sells at once); nothing else is accepted",
        section=DEVELOPMENT,
    ),
    Variable(
        "PAYMENT_SANDBOX",
        default="`false` (`true` in `make run`'s `.env`)",
        meaning="the sandbox payment page; never in production (`payments.E004`)",
        section=DEVELOPMENT,
    ),
    Variable(
        "PAYMENT_SANDBOX_ALLOW_WITHOUT_DEBUG",
        default="`false` (`true` in `make run`'s `.env`)",
        meaning="the sandbox without `DJANGO_DEBUG` (demo only, `payments.E002` otherwise)",
        section=DEVELOPMENT,
    ),
    Variable(
        "PAYMENT_SANDBOX_WEBHOOK_URL",
        default="`http://127.0.0.1:$PORT/v1/payments/webhook`",
        meaning="where the sandbox posts its webhook (never taken from the request)",
        section=DEVELOPMENT,
    ),
)
