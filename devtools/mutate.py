"""``make mutate``: remove each protection in turn, in a scratch copy of the tree, and check that the tests see it.

Each mutation names its target by the syntax tree, not by exact source text: a file, the qualified name of the
function, method, class or module-level constant (a SQL string) that holds the code (``<module>`` for a module's
own statements, such as its imports; the only target of a file that is not Python, such as the Makefile or the
front's ``deploy/haproxy/haproxy.cfg.template``), and a snippet that must occur exactly once in that definition's
source,
compared with whitespace ignored (so ``ruff format`` or re-indented SQL does not break it). The snippet's text is
replaced and the file must still parse.

For every mutation: copy the tree (without .venv, .data, .git) to a temporary directory, apply it, check that the
mutant starts (Django's system checks and an import of the mutated module), then run the tests that guard the
protection with this checkout's venv against the running embedded PostgreSQL (or ``DATABASE_URL``) under a test
database of its own, and expect at least one of them to FAIL. The unmutated copy must pass the same tests first.

Each mutant ends in one of three states: ``CAUGHT`` (a test failed), ``MISSED`` (every test passed) or ``ERROR``
(the target is missing or ambiguous, the mutant does not parse or start, a test errored in set-up or collection, a
named test does not exist). Exit code 0 only when every mutant was caught: an error is never counted as caught.
``skincare/tests/test_mutate_tool.py`` locates every target in ``make test``, so moved code fails there first.

    python -m devtools.mutate                 # all mutations
    python -m devtools.mutate skip-locked retry-set-empty   # some of them
    python -m devtools.mutate --list          # name, file and qualified name of each target
    python -m devtools.mutate --check         # locate and apply every mutation in memory, run nothing
"""

import argparse
import ast
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
IGNORE = shutil.ignore_patterns(
    ".venv",
    ".data",
    ".git",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    ".mypy_cache",
    ".hypothesis",
    "staticfiles",
    "bench-results",
)
MODULE = "<module>"


@dataclasses.dataclass(frozen=True)
class Mutation:
    name: str
    what: str
    path: str
    where: str  # qualified name of the enclosing definition: "func", "Class.method", "SQL_CONSTANT" or "<module>"
    original: str  # found exactly once in that definition's source, whitespace ignored
    replacement: str
    tests: tuple[str, ...]


MUTATIONS = [
    Mutation(
        "skip-locked",
        "the sweeper's claim waits for held orders (SKIP LOCKED dropped)",
        "orders/locks.py",
        "lock_due_orders",
        "FOR NO KEY UPDATE SKIP LOCKED",
        "FOR NO KEY UPDATE",
        ("orders/tests/test_sweeper_faults.py::test_sweeper_skips_an_order_someone_holds_without_waiting",),
    ),
    Mutation(
        "retry-set-empty",
        "deadlocks and serialization failures are not retried (RETRYABLE_SQLSTATES emptied)",
        "skincare/db.py",
        "RETRYABLE_SQLSTATES",
        'frozenset({"40001", "40P01"})',
        "frozenset()",
        (
            "payments/tests/test_faults.py::test_a_deadlocked_checkout_is_retried_and_succeeds",
            "payments/tests/test_faults.py::test_a_serialization_failure_is_retried_from_the_start",
        ),
    ),
    Mutation(
        "no-retry-checkout",
        "retry_transient removed from checkout",
        "checkout/services.py",
        "_place",
        "@retry_transient",
        "",
        (
            "payments/tests/test_faults.py::test_a_deadlocked_checkout_is_retried_and_succeeds",
            "payments/tests/test_faults.py::test_lock_timeout_on_checkout_is_503_busy_and_writes_nothing",
        ),
    ),
    Mutation(
        "refusal-commits-writes",
        "a checkout refused after it wrote commits what it wrote (the runner no longer asks whether it wrote)",
        "skincare/db.py",
        "atomic_refusals_commit",
        "if not outermost or not _wrote_nothing():",
        "if not outermost:",
        ("skincare/tests/test_prepared_statements.py::test_a_refusal_after_a_write_still_rolls_back_everything",),
    ),
    Mutation(
        "generic-plans-off",
        "the checkout no longer asks for generic plans (PostgreSQL plans the quote read and ORDER_SQL on every call)",
        "checkout/services.py",
        "read_quotes",
        "generic_plans()",
        "pass",
        ("skincare/tests/test_generic_plans.py::test_the_checkout_statements_are_planned_once",),
    ),
    Mutation(
        "stale-k-refuses",
        "a checkout that read K = 1 refuses when bucket 0 is short, without looking for the rows K was raised to since",
        "inventory/reserve.py",
        "has_other_stock_rows",
        "return StockBucket.objects.filter(product_id=product_id).exclude(bucket=0).exists()",
        "return False",
        (
            "inventory/tests/test_stale_quote.py::test_one_product_whose_k_was_raised_after_the_quote_is_sold",
            "inventory/tests/test_stale_quote.py::test_several_products_one_of_which_had_k_raised_after_the_quote_are_sold",
        ),
    ),
    Mutation(
        "full-pass-misses-new-rows",
        "the full pass locks the stock rows once: rows a new bucket count added while it waited are not counted",
        "inventory/buckets.py",
        "lock_all_buckets",
        "if cursor.fetchone()[0] <= len(available):",
        "if True:",
        ("inventory/tests/test_stale_quote.py::test_the_full_pass_counts_rows_added_while_it_waited",),
    ),
    Mutation(
        "no-retry-cancel",
        "retry_transient removed from cancel",
        "orders/services.py",
        "order_cancel",
        "@retry_transient",
        "",
        (
            "payments/tests/test_faults.py::test_a_deadlocked_cancel_is_retried_and_succeeds",
            "payments/tests/test_faults.py::test_lock_timeout_on_cancel_is_503_busy_and_writes_nothing",
        ),
    ),
    Mutation(
        "no-retry-sweeper",
        "retry_transient removed from the sweeper",
        "orders/services.py",
        "orders_expire_due",
        "@retry_transient",
        "",
        (
            "orders/tests/test_sweeper_faults.py::test_sweeper_lock_timeout_is_busy_and_writes_nothing",
            "orders/tests/test_sweeper_faults.py::test_sweeper_command_reports_busy_with_exit_code_1",
        ),
    ),
    Mutation(
        "count-ignores-version",
        "Set counted stock saves a figure typed against a stale form (the version check dropped)",
        "inventory/services.py",
        "stock_set_counted",
        "if inventory.version != expected_version:",
        "if False:",
        (
            "inventory/tests/test_stale_form.py::test_count_typed_against_stale_figures_is_refused_and_the_reservation_survives",
        ),
    ),
    Mutation(
        "pay-after-deadline",
        "the webhook pays without checking the deadline by the database clock",
        "payments/services.py",
        "_decide",
        "or db_now() < order.payment_expires_at",
        "or True",
        ("payments/tests/test_webhook_races.py::test_payment_at_the_deadline_racing_the_sweeper",),
    ),
    Mutation(
        "outage-is-500",
        "connection failures are not recognised (outage answers 500)",
        "skincare/db.py",
        "is_connection_failure",
        'return code is None or code.startswith("08") or code in UNAVAILABLE_SQLSTATES',
        "return False",
        ("payments/tests/test_faults.py::test_checkout_connection_killed_after_its_first_statements_is_a_clean_503",),
    ),
    Mutation(
        "no-body-limit",
        "the request body limit middleware lets everything through",
        "skincare/middleware.py",
        "RequestBodyLimitMiddleware.__call__",
        "if limit is not None and length > limit:",
        "if False:",
        ("skincare/tests/test_fuzz.py::test_a_body_over_the_limit_is_413_payload_too_large_and_changes_nothing",),
    ),
    Mutation(
        "deep-json-500",
        "RecursionError from deeply nested JSON is not caught",
        "skincare/api.py",
        "parse_json",
        "except RecursionError:",
        "except ZeroDivisionError:",
        ("skincare/tests/test_fuzz.py::test_any_checkout_body_from_a_customer_is_never_a_5xx",),
    ),
    Mutation(
        "pipeline-skips-authentication",
        "the API's pipeline calls the view without authenticating the bearer token",
        "skincare/apiview.py",
        "ApiView.dispatch",
        "api_request.user = request.user = self.authenticated_user(request)",
        "api_request.user = request.user = None",
        ("skincare/tests/test_apiview.py::test_every_step_answers_as_drfs_dispatch",),
    ),
    Mutation(
        "pipeline-skips-permissions",
        "the API's pipeline calls the view without its permission checks (a stranger's PUT is a 405, not a 401)",
        "skincare/apiview.py",
        "ApiView.dispatch",
        "self.check_permissions(api_request)",
        "None",
        ("skincare/tests/test_apiview.py::test_every_step_answers_as_drfs_dispatch",),
    ),
    Mutation(
        "pipeline-no-allow",
        "the API's answers no longer name the view's methods (Allow)",
        "skincare/apiview.py",
        "ApiView.dispatch",
        'response["Allow"] = self.allow()',
        "pass",
        ("skincare/tests/test_apiview.py::test_every_step_answers_as_drfs_dispatch",),
    ),
    Mutation(
        "pipeline-view-holds-itself",
        "the API's views are set up as Django's (self.head = self.get): each request waits for the cyclic collector",
        "skincare/apiview.py",
        "ApiView.setup",
        "self.request, self.args, self.kwargs = request, args, kwargs",
        "super().setup(request, *args, **kwargs)",
        ("skincare/tests/test_apiview.py::test_an_api_request_leaves_nothing_for_the_cyclic_garbage_collector",),
    ),
    Mutation(
        "json-nan-accepted",
        "a body with NaN or Infinity is parsed (into a float no JSON answer can carry), not refused with a 400",
        "skincare/api.py",
        "_DECODER",
        "json.JSONDecoder(parse_constant=drf_json.strict_constant)",
        "json.JSONDecoder()",
        ("skincare/tests/test_apiview.py::test_the_parser_reads_what_drfs_parser_reads",),
    ),
    Mutation(
        "json-depth-counted-loosely",
        "a body whose brackets are fewer than ten times the depth limit is never walked: nesting just past the limit "
        "is read",
        "skincare/api.py",
        "parse_json",
        'if text.count("[") + text.count("{") > MAX_JSON_DEPTH and',
        'if text.count("[") + text.count("{") > 10 * MAX_JSON_DEPTH and',
        (
            "skincare/tests/test_apiview.py::"
            "test_a_body_nested_deeper_than_the_limit_is_refused_however_few_its_other_brackets",
        ),
    ),
    Mutation(
        "token-feed-ignored",
        "a process reads the feed of token invalidations but forgets nobody: a revoked token keeps working",
        "skincare/selectors.py",
        "_feed_follow",
        "gone = {user_id for row_id, user_id in rows if row_id not in _feed.seen}",
        "gone = set()",
        ("skincare/tests/test_token_feed.py::test_an_invalidation_elsewhere_is_refused_within_one_feed_read",),
    ),
    Mutation(
        "token-feed-id-cursor",
        "the feed is followed by its highest id seen: a row committed after a higher id is never processed",
        "skincare/selectors.py",
        "_feed_follow",
        "if row_id not in _feed.seen}",
        "if row_id > max(_feed.seen, default=0)}",
        ("skincare/tests/test_token_feed.py::test_a_revocation_committed_after_a_later_one_is_still_seen",),
    ),
    Mutation(
        "token-feed-gap-trusted",
        "a memory not followed for longer than the feed's gap is trusted (a row outside the window is missed)",
        "skincare/selectors.py",
        "_feed_follow",
        "stale = age > FEED_GAP_SECONDS",
        "stale = _feed.read_at is None",
        ("skincare/tests/test_token_feed.py::test_a_memory_not_followed_for_longer_than_the_gap_is_dropped",),
    ),
    Mutation(
        "token-feed-overtaken-remembered",
        "a lookup during which a feed read ran is remembered (the read may have processed its revocation)",
        "skincare/selectors.py",
        "remember",
        "if feed_seq % 2 or _feed.seq != feed_seq:",
        "if False:",
        ("skincare/tests/test_token_feed.py::test_a_lookup_overtaken_by_a_feed_read_is_not_remembered",),
    ),
    Mutation(
        "nul-token",
        "tokens are looked up without refusing impossible keys (non-ASCII → decoding error)",
        "skincare/api.py",
        "bearer_token_user",
        "if len(raw) > MAX_TOKEN_LENGTH or not TOKEN_BYTES.fullmatch(raw):",
        "if False:",
        ("skincare/tests/test_fuzz.py::test_any_header_value_on_authenticated_endpoints_is_never_a_5xx",),
    ),
    Mutation(
        "no-guarded-reserve",
        "the stock reservation's guard (available_stock >= qty) dropped",
        "inventory/reserve.py",
        "_RESERVE_TEMPLATE",
        "AND available_stock >= %(qty)s{guard}",
        "{guard}",
        (
            "checkout/tests/test_checkout_race.py::test_guarded_update_alone_decides_when_every_buyer_passed_the_early_stock_read",
        ),
    ),
    Mutation(
        "sold-out-memory-unbounded",
        "the sold-out memory keeps refusing past 250 ms (its cap removed)",
        "inventory/soldout.py",
        "window_seconds",
        "return min(max(settings.SOLD_OUT_CACHE_MS, 0) / 1000, MAX_WINDOW_SECONDS)",
        "return max(settings.SOLD_OUT_CACHE_MS, 0) / 1000",
        ("inventory/tests/test_soldout_memory.py::test_the_window_is_never_longer_than_250_ms",),
    ),
    Mutation(
        "remembered-sold-out-keyed",
        "a keyed checkout of a product remembered sold out is answered from the memory, not as its key's answer",
        "checkout/services.py",
        "checkout_place",
        "if key is None and cart_id is None:",
        "if cart_id is None:",
        (
            "checkout/tests/test_soldout_refusal.py::"
            "test_a_keyed_replay_of_a_bought_key_gets_its_201_while_the_product_is_remembered_sold_out",
        ),
    ),
    Mutation(
        "sold-out-memory-asked-twice",
        "a checkout of items without a key asks the sold-out memory again inside its transaction",
        "checkout/services.py",
        "ask_sold_out_memory",
        "if not state.memory_asked:",
        "if True:",
        ("checkout/tests/test_one_entry.py::test_every_variant_merges_its_items_once_and_asks_the_memory_once",),
    ),
    Mutation(
        "remembered-sold-out-counted",
        "an unkeyed checkout of a product remembered sold out is counted against the rate limit (a statement) "
        "before the memory refuses it",
        "checkout/services.py",
        "checkout_place",
        "refuse_remembered_short(quantities)",
        "ratelimit.checkout_rate_limit(customer=customer) or refuse_remembered_short(quantities)",
        (
            "checkout/tests/test_soldout_refusal.py::"
            "test_a_remembered_refusal_is_not_counted_and_asks_nothing_with_the_rate_limit_on",
        ),
    ),
    Mutation(
        "nowait-waits",
        "row_lock_nowait products wait for the row instead of answering lock_busy",
        "inventory/reserve.py",
        "lock_rows",
        "select_for_update(no_key=True, nowait=nowait)",
        "select_for_update(no_key=True, nowait=False)",
        ("inventory/tests/test_strategies.py::test_nowait_answers_lock_busy_at_once_while_the_row_is_held",),
    ),
    Mutation(
        "shared-lock-waits",
        "a multi-product order of one-row products locks its rows waiting, though one of them is row_lock_nowait",
        "inventory/plan.py",
        "_rows_together",
        "nowait = any(strategy_of(line).nowait for line in lines)",
        "nowait = False",
        (
            "inventory/tests/test_plan.py::"
            "test_several_one_row_products_are_locked_together_first_ascending_whatever_their_strategies",
        ),
    ),
    Mutation(
        "serializable-not-escalated",
        "a serializable product's checkout runs at READ COMMITTED",
        "checkout/services.py",
        "restart_at_strategy_isolation",
        'raise RestartTransaction("a product\'s strategy needs another isolation level", isolation=isolation)',
        "pass",
        ("inventory/tests/test_strategies.py::test_changing_the_strategy_in_the_admin_changes_how_checkouts_lock",),
    ),
    Mutation(
        "optimistic-no-version",
        "the optimistic update forgets to compare the version it read",
        "inventory/plan.py",
        "_update",
        "at_version = strategy_of(line).checks_version and line.version is not None",
        "at_version = False",
        (
            "inventory/tests/test_strategies.py::test_optimistic_gives_up_after_its_bound_when_the_version_keeps_changing",
        ),
    ),
    Mutation(
        "refusals-unbounded",
        "refusals stored under fresh Idempotency-Keys are never trimmed",
        "checkout/idempotency.py",
        "TRIM_REFUSALS_SQL",
        "ORDER BY id DESC OFFSET %(keep)s)",
        "ORDER BY id DESC OFFSET %(keep)s LIMIT 0)",
        ("checkout/tests/test_idempotency.py::test_stored_refusals_are_bounded_per_customer",),
    ),
    Mutation(
        "no-customer-lock",
        "checkout no longer takes the customer's checkout lock (limits counted before the previous order committed)",
        "checkout/services.py",
        "QUOTES_SQL",
        "(SELECT 1 FROM pg_advisory_xact_lock(%(customer_lock)s)) AS customer_locked",
        "1 AS customer_locked",
        (
            "orders/tests/test_limits.py::test_thirty_concurrent_checkouts_by_one_customer_never_pass_the_limit",
            "orders/tests/test_limits.py::test_pending_cap_holds_under_concurrency",
        ),
    ),
    Mutation(
        "rate-window-never-resets",
        "the checkout rate-limit counter keeps counting across windows (a limited customer stays locked out)",
        "skincare/services.py",
        "_RATE_LIMIT_HIT_SQL",
        "THEN rate_limit_counters.hits + 1 ELSE 1 END",
        "THEN rate_limit_counters.hits + 1 ELSE rate_limit_counters.hits + 1 END",
        ("skincare/tests/test_abuse.py::test_a_rate_limited_customer_can_check_out_again_once_the_window_has_passed",),
    ),
    Mutation(
        "sweeper-early",
        "the sweeper claims orders up to a minute before their payment window closes",
        "orders/locks.py",
        "lock_due_orders",
        "AND payment_expires_at <= LEAST(now(), %s::timestamptz)",
        "AND payment_expires_at <= LEAST(now() + interval '1 minute', %s::timestamptz)",
        ("orders/tests/test_sweeper.py::test_a_sweep_expires_what_is_due_and_nothing_due_later",),
    ),
    Mutation(
        "sandbox-any-state",
        "the sandbox sends a payment for an order that is no longer pending (e.g. cancelled)",
        "payments/sandbox.py",
        "_why_nothing_to_send",
        "if order.status != Order.Status.PENDING_PAYMENT:",
        "if False:",
        ("payments/tests/test_sandbox.py::test_a_cancelled_or_expired_order_is_not_paid_from_the_sandbox",),
    ),
    Mutation(
        "sandbox-no-in-flight-claim",
        "every press of the sandbox queues another delivery",
        "payments/sandbox.py",
        "_dispatch",
        "if event_id in _in_flight: return False",
        "pass",
        ("payments/tests/test_sandbox.py::test_presses_at_once_queue_one_delivery_on_one_thread",),
    ),
    Mutation(
        "xff-from-anyone",
        "X-Forwarded-For is believed from any peer, not only a trusted proxy",
        "skincare/clientaddr.py",
        "client_address",
        "if peer is None or not networks or not _is_trusted(peer, networks):",
        "if peer is None or not networks:",
        ("skincare/tests/test_client_address.py::test_a_forged_x_forwarded_for_from_an_untrusted_peer_is_ignored",),
    ),
    Mutation(
        "throttle-raw-username",
        'the admin throttle counts the raw POSTed username ("demo-ops " dodges it)',
        "skincare/login_throttle.py",
        "AdminLoginThrottleMiddleware.__call__",
        'username = login_username(request.POST.get("username", ""))',
        'username = request.POST.get("username", "")[:150]',
        ("skincare/tests/test_client_address.py::test_a_username_with_spaces_counts_for_the_account",),
    ),
    Mutation(
        "ipv6-per-address",
        "the admin throttle counts IPv6 clients per address instead of per /64",
        "skincare/clientaddr.py",
        "throttle_key",
        "return str(ipaddress.IPv6Network((address, 64), strict=False).network_address)",
        "return str(address)",
        ("skincare/tests/test_client_address.py::test_two_ipv6_addresses_in_one_64_share_a_counter",),
    ),
    Mutation(
        "schema-per-request",
        "GET /v1/schema regenerates the document on every request",
        "skincare/openapi.py",
        "SchemaView.get",
        "if SchemaView._schema is None:",
        "if True:",
        ("skincare/tests/test_openapi.py::test_the_schema_is_generated_once_per_process",),
    ),
    Mutation(
        "sale-window-unchecked",
        "checkout ignores the sale window (the quote's state is never looked at)",
        "checkout/services.py",
        "OPEN_ORDER",
        "    refuse_outside_sale_window,\n",
        "",
        (
            "payments/tests/test_sale_window.py::test_before_the_window_409_sale_not_started_with_retry_after_and_nothing_written",
        ),
    ),
    Mutation(
        "sale-price-ignored",
        "checkout charges the regular price inside an open sale window",
        "inventory/selectors.py",
        "UNIT_PRICE_SQL",
        "THEN p.sale_price ELSE p.price END",
        "THEN p.price ELSE p.price END",
        (
            "payments/tests/test_sale_window.py::test_inside_the_window_the_sale_price_is_the_unit_price_and_the_amount_the_webhook_must_match",
        ),
    ),
    Mutation(
        "sale-not-started-stored",
        "a refusal whose wait varies (409 sale_not_started) loses its Retry-After and is stored under the "
        "Idempotency-Key",
        "skincare/errors.py",
        "RetryAfterError.__post_init__",
        "self.retry_after = max(1, math.ceil(self.retry_after_seconds))",
        "self.retry_after = None",
        (
            "payments/tests/test_sale_window.py::test_a_409_sale_not_started_is_not_stored_so_the_same_key_buys_once_the_sale_opens",
        ),
    ),
    Mutation(
        "retryable-refusal-stored",
        "a retryable refusal (409 lock_busy, with Retry-After) is stored under its Idempotency-Key",
        "checkout/idempotency.py",
        "replayable",
        "return 400 <= exc.http_status < 500 and exc.retry_after is None",
        "return 400 <= exc.http_status < 500",
        (
            "checkout/tests/test_idempotency.py::test_a_lock_busy_answer_is_not_stored_and_the_retry_with_the_same_key_succeeds",
            "carts/tests/test_carts_api.py::test_a_keyed_cart_checkout_before_the_sale_is_not_stored_and_the_same_key_buys_once_it_opens",
        ),
    ),
    Mutation(
        "bucket-claim-waits",
        "a bucketed product's claim waits for a held bucket (SKIP LOCKED dropped)",
        "inventory/reserve.py",
        "CLAIM_BUCKET_SQL",
        "FOR NO KEY UPDATE SKIP LOCKED",
        "FOR NO KEY UPDATE",
        ("inventory/tests/test_buckets.py::test_a_checkout_never_waits_while_a_free_bucket_has_the_units",),
    ),
    Mutation(
        "bucket-waiters-unspread",
        "a bucketed product's claims take the lowest bucket with the units, not the order's (every waiter queues on one)",
        "inventory/reserve.py",
        "_CLAIM_PICK",
        "ORDER BY mod(bucket + %(bucket_count)s - mod(%(order_id)s, %(bucket_count)s), %(bucket_count)s)",
        "ORDER BY bucket",
        ("inventory/tests/test_buckets.py::test_concurrent_buyers_queue_one_to_a_bucket",),
    ),
    Mutation(
        "bucket-refused-without-fallback",
        "a bucketed product is refused when no single bucket can cover the request (no full pass)",
        "inventory/reserve.py",
        "_reserve_bucketed",
        "_reserve_from_all(line, order_id=order_id)",
        "raise StockConflict(product_ids=[line.product_id])",
        ("inventory/tests/test_buckets.py::test_a_request_larger_than_any_bucket_moves_units_and_sells",),
    ),
    Mutation(
        "full-pass-unlocked",
        "the full pass reads a product's stock rows without locking them",
        "inventory/buckets.py",
        "LOCK_ALL_BUCKETS_SQL",
        "ORDER BY bucket FOR NO KEY UPDATE",
        "ORDER BY bucket",
        (
            "inventory/tests/test_full_pass_lock.py::test_the_full_pass_waits_for_a_held_stock_row_and_counts_what_it_holds",
        ),
    ),
    Mutation(
        "bucket-released-to-bucket-0",
        "units of an ending reservation go back to bucket 0, not to the bucket that holds them",
        "inventory/reserve.py",
        "_move_reserved",
        "placed.append((line.product_id, line.bucket, line.order_id, line.qty))",
        "placed.append((line.product_id, 0, line.order_id, line.qty))",
        (
            "orders/tests/test_sweeper.py::test_three_sweepers_over_thousands_of_due_orders_with_checkouts_running[bucketed]",
        ),
    ),
    Mutation(
        "upward-import",
        "inventory imports orders (the dependency guard must notice)",
        "inventory/selectors.py",
        MODULE,
        "from django.db import connection",
        "from django.db import connection\nfrom orders.models import Order  # noqa: F401",
        ("skincare/tests/test_dependencies.py::test_every_import_follows_the_map",),
    ),
    Mutation(
        "local-cross-app-import",
        "the back office imports orders inside a function (allowed downward, but hidden from the module's head)",
        "backoffice/sale_setup.py",
        MODULE,
        "from django.conf import settings",
        "from django.conf import settings\n\n\ndef _late():\n    from orders import services  # noqa: F401\n",
        ("skincare/tests/test_dependencies.py::test_no_import_inside_a_function_crosses_apps",),
    ),
    Mutation(
        "cart-claim-unconditional",
        "the cart checkout's claim no longer requires an open cart (status check dropped)",
        "carts/services.py",
        "_CLAIM_SQL",
        "AND status = %(open)s",
        "",
        ("carts/tests/test_cart_races.py::test_fifty_concurrent_checkouts_of_one_cart_make_exactly_one_order",),
    ),
    Mutation(
        "cart-expiry-ignored",
        "the cart checkout's claim ignores the cart's expiry",
        "carts/services.py",
        "_CLAIM_SQL",
        "AND expires_at > now()",
        "",
        ("carts/tests/test_carts_api.py::test_an_expired_cart_is_410_on_get_put_and_checkout_nothing_written",),
    ),
    Mutation(
        "reservation-bucket-any-product",
        "a reservation may name a bucket of another product (the trigger's product_id condition dropped)",
        "orders/migrations/0003_reservation_bucket.py",
        "BUCKET_EXISTS",
        "WHERE product_id = NEW.product_id AND bucket = NEW.bucket",
        "WHERE bucket = NEW.bucket",
        (
            "orders/tests/test_reservation_bucket.py::test_a_reservation_cannot_name_a_bucket_that_only_another_product_has",
        ),
    ),
    Mutation(
        "cart-cap-counts-checked-out",
        "the open-cart cap counts checked-out carts too",
        "carts/services.py",
        "_OPEN_CARTS_SQL",
        "AND status = %(open)s",
        "AND %(open)s IS NOT NULL",
        ("carts/tests/test_cart_cap.py::test_a_checked_out_cart_no_longer_counts_against_the_cap",),
    ),
    Mutation(
        "report-currency-mismatch-dropped",
        "the sale report leaves currency mismatches out of the payments that need ops",
        "payments/reporting.py",
        "PAYMENTS_SQL",
        ", '{CURRENCY_MISMATCH}'",
        "",
        ("backoffice/tests/test_sale_report_sums.py::test_every_payment_that_needs_ops_is_listed",),
    ),
    Mutation(
        "report-currency-mismatch-uncounted",
        "the sale report counts amount mismatches only, not currency mismatches",
        "payments/reporting.py",
        "payments_for_report",
        'found["mismatches"] += count',
        'found["mismatches"] += count if status == AMOUNT_MISMATCH else 0',
        ("backoffice/tests/test_sale_report_sums.py::test_every_payment_that_needs_ops_is_listed",),
    ),
    Mutation(
        "report-revenue-whole-order",
        "the sale report's revenue reads the whole order's total for each line (multi-product orders counted again)",
        "backoffice/sale_report.py",
        "ORDERS_SQL",
        "l.qty * l.unit_price",
        "o.total",
        ("backoffice/tests/test_sale_report_sums.py::test_revenue_is_the_products_own_lines_of_each_paid_order",),
    ),
    # Checks that must fail closed.
    Mutation(
        "no-mode-is-development",
        "a process started with no DJANGO_ENV runs development mode (the production switch fails open)",
        "config/modes.py",
        "mode",
        "return PRODUCTION  # nothing asked for development",
        "return DEVELOPMENT  # nothing asked for development",
        ("skincare/tests/test_production_switch.py::test_no_mode_at_all_is_production",),
    ),
    Mutation(
        "currency-unchecked",
        "a payment event in another currency pays the order",
        "payments/services.py",
        "_decide",
        "if currency != order.currency:",
        "if False:",
        ("payments/tests/test_webhook.py::test_another_currency_is_a_mismatch_never_a_payment",),
    ),
    Mutation(
        "currency-against-the-shop",
        "a payment event's currency is compared with the current SHOP_CURRENCY instead of the order's own",
        "payments/services.py",
        "_decide",
        "if currency != order.currency:",
        "if currency != settings.SHOP_CURRENCY:",
        (
            "payments/tests/test_webhook_currency.py::test_an_order_is_paid_in_its_own_currency_after_the_shop_changed_currency",
        ),
    ),
    Mutation(
        "lockout-per-username-only",
        "the admin lockout counts a username's failures from every address together (a stranger locks staff out)",
        "skincare/login_throttle.py",
        "blocked",
        'pair=Count("id", filter=here & Q(username=username)),',
        'pair=Count("id", filter=Q(username=username)),',
        (
            "skincare/tests/test_login_lockout.py::test_an_attackers_failures_do_not_stop_the_real_operator_logging_in_from_another_address",
        ),
    ),
    Mutation(
        "xff-client-written-entry",
        "with every hop trusted, the client-written left-most X-Forwarded-For entry is taken",
        "skincare/clientaddr.py",
        "client_address",
        "return parse_address(entries[-1]) if entries else peer",
        "return hop",
        (
            "skincare/tests/test_client_address.py::test_when_every_hop_is_trusted_the_client_written_entry_is_never_taken",
        ),
    ),
    Mutation(
        "window-not-rechecked",
        "ORDER_SQL decides the sale window by the transaction's start, not by its own statement's clock",
        "orders/services.py",
        "ORDER_ROWS_SQL",
        "AND p.sale_ends_at <= statement_timestamp())",
        "AND p.sale_ends_at <= now())",
        (
            "payments/tests/test_sale_window_recheck.py::test_no_order_is_written_once_the_window_closed_while_the_checkout_waited",
        ),
    ),
    Mutation(
        "cart-price-window-loose",
        "a cart shows the sale price whenever the product has a window, open or not",
        "inventory/selectors.py",
        "UNIT_PRICE_SQL",
        "AND ({SALE_STATE_SQL}) = '{SALE_OPEN}'",
        "AND ({SALE_STATE_SQL}) IS NOT NULL",
        ("carts/tests/test_cart_prices.py::test_a_carts_get_shows_the_sale_price_inside_the_window_only",),
    ),
    Mutation(
        "cart-answer-price-window-loose",
        "a cart's create and replace answers show the sale price whenever the product has a window, open or not",
        "inventory/selectors.py",
        "ProductView.unit_price",
        "self.sale == SALE_OPEN",
        "self.sale is not None",
        (
            "carts/tests/test_cart_prices.py::test_a_carts_create_and_replace_answers_show_the_sale_price_inside_the_window_only",
        ),
    ),
    Mutation(
        "published-secret-unstripped",
        "a published demo secret with surrounding whitespace passes the production checks",
        "skincare/demo.py",
        "is_published",
        "return value in PUBLISHED_SECRETS or value.strip() in PUBLISHED_SECRETS",
        "return value in PUBLISHED_SECRETS",
        (
            "skincare/tests/test_production_switch.py::test_a_published_secret_with_surrounding_whitespace_is_still_refused",
        ),
    ),
    Mutation(
        "metrics-token-prefix",
        "/metrics accepts an empty or prefix Bearer token",
        "skincare/metrics.py",
        "bearer_matches",
        "hmac.compare_digest(given.strip().encode(), token.encode())",
        "token.startswith(given.strip())",
        ("skincare/tests/test_metrics.py::test_an_empty_prefix_or_longer_bearer_token_is_refused",),
    ),
    Mutation(
        "login-username-unnormalised",
        "the login throttle keys a username as typed (a fullwidth spelling escapes its lock)",
        "skincare/login_throttle.py",
        "login_username",
        "return get_user_model().normalize_username(str(raw).strip())[:USERNAME_MAX_LENGTH]",
        "return str(raw).strip()[:USERNAME_MAX_LENGTH]",
        ("skincare/tests/test_login_lockout.py::test_a_fullwidth_spelling_of_a_locked_username_is_the_same_lock",),
    ),
    # The production switch and the admin login throttle: a lockout nobody can aim.
    Mutation(
        "dot-env-first-line-wins",
        "the first DJANGO_ENV= line of .env counts, not the last (an appended production line still runs development)",
        "config/modes.py",
        "dot_env_value",
        "if match:",
        "if match and value is None:",
        ("skincare/tests/test_production_switch.py::test_a_dot_env_line_that_contradicts_development_refuses",),
    ),
    Mutation(
        "secret-length-unstripped",
        "a secret's length is measured before stripping whitespace (a padded short secret passes)",
        "skincare/checks.py",
        "weak_secret",
        "if len(stripped) < MIN_SECRET_LENGTH:",
        "if len(value) < MIN_SECRET_LENGTH:",
        ("skincare/tests/test_production_switch.py::test_a_short_secret_padded_with_whitespace_is_still_short",),
    ),
    Mutation(
        "trusted-proxies-too-wide-allowed",
        "production accepts a TRUSTED_PROXIES range outside the private and loopback networks",
        "skincare/checks.py",
        "production_trusted_proxies",
        "if not settings.PRODUCTION:",
        "if True:",
        (
            "skincare/tests/test_production_switch.py::test_production_refuses_weak_secrets_and_failed_deployment_checks",
        ),
    ),
    Mutation(
        "trusted-proxies-ipv6-half-internet",
        "production trusts an IPv6 range of half the internet (8000::/1 counts as a proxy network)",
        "skincare/clientaddr.py",
        "PROXY_NETWORKS",
        '"fc00::/7"',
        '"8000::/1"',
        (
            "skincare/tests/test_client_address.py::test_production_refuses_trusted_ranges_that_are_not_private_or_loopback",
        ),
    ),
    Mutation(
        "trusted-proxies-width-only",
        "a trusted range is checked for its width only: a public /8 or /24 passes as a proxy network",
        "skincare/clientaddr.py",
        "not_private",
        "network.subnet_of(allowed)",
        "network.prefixlen >= allowed.prefixlen",
        (
            "skincare/tests/test_client_address.py::test_production_refuses_trusted_ranges_that_are_not_private_or_loopback",
        ),
    ),
    Mutation(
        "untrusted-forwarding-silent",
        "requests with X-Forwarded-For while TRUSTED_PROXIES is empty are not warned about",
        "skincare/clientaddr.py",
        "report_untrusted_forwarding",
        "_ForwardingReport.logged = True",
        "return",
        (
            "skincare/tests/test_client_address.py::test_requests_through_an_undeclared_proxy_log_one_warning_per_process",
        ),
    ),
    Mutation(
        "login-success-clears-address",
        "a successful admin login forgets every failure of its address, not only its own username's",
        "skincare/signals.py",
        "forget_admin_login_failures",
        "AdminLoginFailure.objects.filter(username=user.get_username(), client_ip=client_ip(request)).delete()",
        "AdminLoginFailure.objects.filter(client_ip=client_ip(request)).delete()",
        (
            "skincare/tests/test_login_lockout.py::test_a_success_forgets_only_its_own_usernames_failures_of_the_address",
        ),
    ),
    Mutation(
        "xff-garbage-is-the-proxy",
        "an unreadable X-Forwarded-For hop falls back to the proxy's own address (loopback opens /metrics)",
        "skincare/clientaddr.py",
        "client_address",
        "return hop",
        "return peer",
        ("skincare/tests/test_client_address.py::test_an_unreadable_hop_is_the_hop_that_forwarded_it_not_the_proxy",),
    ),
    Mutation(
        "username-lock-spares-other-usernames",
        "the username-wide lock spares addresses that failed only for other usernames",
        "skincare/login_throttle.py",
        "blocked",
        'and counts["by_address"] > 0',
        'and counts["pair"] > 0',
        (
            "skincare/tests/test_login_lockout.py::test_the_usernames_lock_blocks_an_address_that_failed_only_for_other_usernames",
        ),
    ),
    Mutation(
        "known-device-ignored",
        "a browser that logged in before is throttled like any other (the username-wide lock aims at the operator)",
        "skincare/login_throttle.py",
        "AdminLoginThrottleMiddleware.__call__",
        "device=known_device(request, username)",
        "device=None",
        ("skincare/tests/test_login_lockout.py::test_a_known_device_logs_in_through_the_username_and_address_locks",),
    ),
    Mutation(
        "login-throttle-check-then-record",
        "the admin login throttle checks its counters, lets the attempt through and records the failure afterwards",
        "skincare/login_throttle.py",
        "admit",
        'attempt = AdminLoginFailure.objects.create(client_ip=address, username=username, device=device or "")',
        "return True, None",
        ("skincare/tests/test_login_throttle_race.py::test_concurrent_wrong_passwords_let_at_most_the_limit_through",),
    ),
    Mutation(
        "login-throttle-count-unlocked",
        "the admin login throttle counts and records without the counters' lock (concurrent attempts all count first)",
        "skincare/login_throttle.py",
        "admit",
        'advisory_xact_lock(space="admin_login", idents=counter_keys(address=address, username=username, device=device))',
        "pass",
        ("skincare/tests/test_login_throttle_race.py::test_the_count_and_the_record_are_taken_under_one_lock",),
    ),
    Mutation(
        "known-device-never-expires",
        "a known-device cookie is honoured however old it is",
        "skincare/login_throttle.py",
        "known_device",
        "signing.loads(value, salt=KNOWN_DEVICE_SALT, max_age=KNOWN_DEVICE_MAX_AGE_SECONDS)",
        "signing.loads(value, salt=KNOWN_DEVICE_SALT)",
        ("skincare/tests/test_login_lockout.py::test_a_known_device_cookie_older_than_its_lifetime_is_not_honoured",),
    ),
    Mutation(
        "known-device-cookie-no-lifetime",
        "the known-device cookie is set without its lifetime (Max-Age)",
        "skincare/login_throttle.py",
        "AdminLoginThrottleMiddleware.__call__",
        "max_age=KNOWN_DEVICE_MAX_AGE_SECONDS,",
        "",
        (
            "skincare/tests/test_login_lockout.py::test_the_known_device_cookie_has_a_lifetime_and_is_secure_in_production",
        ),
    ),
    Mutation(
        "known-device-cookie-not-secure",
        "the known-device cookie is sent without Secure in production (it travels over plain HTTP)",
        "skincare/login_throttle.py",
        "AdminLoginThrottleMiddleware.__call__",
        "secure=settings.SESSION_COOKIE_SECURE,",
        "secure=False,",
        (
            "skincare/tests/test_login_lockout.py::test_the_known_device_cookie_has_a_lifetime_and_is_secure_in_production",
        ),
    ),
    Mutation(
        "known-device-unrevocable",
        "a known-device cookie is honoured after its device was revoked (its signature is all that is checked)",
        "skincare/login_throttle.py",
        "known_device",
        "return device if KnownDevice.objects.filter(device=device, username=username).exists() else None",
        "return device",
        ("skincare/tests/test_login_lockout.py::test_a_known_device_is_revoked_one_by_one_and_all_at_once",),
    ),
    Mutation(
        "secret-key-fallbacks-unread",
        "DJANGO_SECRET_KEY_FALLBACKS is not read (rotating the key invalidates every pass, link and session at once)",
        "config/settings.py",
        "SECRET_KEY_FALLBACKS",
        '_fallbacks.split(",") if _fallbacks else []',
        "[]",
        ("skincare/tests/test_key_rotation.py::test_the_fallbacks_are_read_from_the_environment",),
    ),
    Mutation(
        "published-fallback-key-allowed",
        "production accepts a published demo/test key among DJANGO_SECRET_KEY_FALLBACKS",
        "skincare/checks.py",
        "production_secret_key",
        "if demo.is_published(key)]",
        "if False]",
        ("skincare/tests/test_key_rotation.py::test_production_refuses_a_published_fallback_key",),
    ),
    Mutation(
        "unlock-reads-raw-address",
        "admin_login_unlock reads ::ffff:a.b.c.d as an IPv6 /64, not the IPv4 key the throttle stored",
        "skincare/login_throttle.py",
        "unlock_key",
        "parsed = parse_address(address)",
        'parsed = __import__("ipaddress").ip_address(address)',
        ("skincare/tests/test_login_lockout.py::test_unlock_reads_an_address_exactly_as_the_throttle_does",),
    ),
    # The waiting room.
    Mutation(
        "queue-no-shuffle",
        "passes that joined before the opening are placed in arrival order, not by their random draw",
        "waitingroom/services.py",
        "PLACE_SQL",
        "ORDER BY NOT qp.early, CASE WHEN qp.early THEN qp.draw END, qp.joined_at, qp.id",
        "ORDER BY NOT qp.early, qp.joined_at, qp.id",
        (
            "waitingroom/tests/test_queue_races.py::test_early_joiners_are_placed_in_an_order_uncorrelated_with_their_arrival",
        ),
    ),
    Mutation(
        "queue-admission-unchecked",
        "a queued product's checkout goes through without an admission",
        "waitingroom/admission.py",
        "admission_use",
        "refused = [row for row in rows if not row[1]]",
        "refused: list = []",
        ("waitingroom/tests/test_queue_races.py::test_no_checkout_of_a_queued_product_without_an_admission",),
    ),
    Mutation(
        "queue-no-pace",
        "admission ignores the pace: everyone the stock allows is admitted at once",
        "waitingroom/services.py",
        "earned_credit",
        "return min(cap, credit + pace * max(0.0, elapsed_seconds))",
        "return float(10**9)",
        ("waitingroom/tests/test_queue_races.py::test_admissions_never_exceed_the_pace_even_with_eight_sweepers",),
    ),
    Mutation(
        "queue-many-passes",
        "a customer's concurrent joins in one process make several passes (the process forgets the passes it answered)",
        "waitingroom/joins.py",
        "JoinLog.issue",
        "signed = self._issued.get(key)",
        "signed = None",
        ("waitingroom/tests/test_queue_races.py::test_fifty_concurrent_joins_of_one_customer_make_one_pass",),
    ),
    Mutation(
        "join-batch-without-one-pass-rule",
        "a batch of joins is written without ON CONFLICT: a customer's second pass fails the whole batch",
        "waitingroom/joins.py",
        "RECORD_SQL",
        "ON CONFLICT (product_id, customer_id) DO UPDATE",
        "",
        (
            "waitingroom/tests/test_join_batch.py::test_one_customers_passes_from_two_processes_keep_one_place_the_earlier",
        ),
    ),
    Mutation(
        "join-later-pass-kept",
        "of one customer's two passes from two processes, the one written first keeps its place, however late",
        "waitingroom/joins.py",
        "RECORD_SQL",
        "WHERE EXCLUDED.joined_at < queue_passes.joined_at AND",
        "WHERE false AND",
        (
            "waitingroom/tests/test_join_batch.py::"
            "test_the_earlier_arrival_keeps_its_place_when_the_later_pass_was_written_first",
        ),
    ),
    Mutation(
        "join-written-per-request",
        "every join is written in its own request, as if QUEUE_JOIN_FLUSH_MS were 0",
        "waitingroom/joins.py",
        "JoinLog.issue",
        "if settings.QUEUE_JOIN_FLUSH_MS == 0:",
        "if True:",
        ("waitingroom/tests/test_join_batch.py::test_a_hundred_joins_cost_the_primary_at_most_five_transactions",),
    ),
    Mutation(
        "join-never-flushed",
        "the flush thread never writes: a pass is written only at its poll",
        "waitingroom/joins.py",
        "JoinLog._run",
        "self.flush()",
        "pass",
        ("waitingroom/tests/test_join_batch.py::test_the_flush_thread_writes_what_its_process_answered",),
    ),
    Mutation(
        "join-lost-with-its-worker",
        "a pass the database lacks (its worker died before its flush) is not written at its poll",
        "waitingroom/services.py",
        "queue_pass_recover",
        "pass_record(signed=signed)",
        "pass",
        (
            "waitingroom/tests/test_join_batch.py::test_a_join_whose_worker_died_before_its_flush_is_written_at_its_next_poll",
        ),
    ),
    Mutation(
        "join-arrival-by-process-clock",
        "a join's arrival instant is the web process's own clock, not the database's",
        "waitingroom/joins.py",
        "arrival_us",
        "return round(counters.db_now() * 1_000_000)",
        "return round(__import__('time').time() * 1_000_000)",
        ("waitingroom/tests/test_join_batch.py::test_the_arrival_is_the_databases_clock_whatever_the_processs_own",),
    ),
    Mutation(
        "join-placed-by-id",
        "after the opening, passes are placed by id (each process's block), not by arrival",
        "waitingroom/services.py",
        "PLACE_SQL",
        "qp.joined_at, qp.id) AS rn",
        "qp.id) AS rn",
        ("waitingroom/tests/test_join_batch.py::test_after_the_opening_passes_are_placed_by_arrival_not_by_id",),
    ),
    Mutation(
        "join-batch-unlocked",
        "a batch of joins does not hold its queues' keys: a removal between its insert and commit leaves a pass",
        "waitingroom/joins.py",
        "passes_write",
        'cursor.execute(JOIN_LOCK_SQL, {"keys": keys})',
        "pass",
        (
            "waitingroom/tests/test_queue_races.py::test_removing_a_queue_is_one_transaction_a_join_cannot_interleave_with",
        ),
    ),
    Mutation(
        "join-into-a-newer-queue",
        "a pass answered before a queue reset is written into the new queue",
        "waitingroom/joins.py",
        "RECORD_SQL",
        "AND (extract(epoch FROM q.created_at) * 1000000)::bigint = j.queue_us",
        "",
        (
            "waitingroom/tests/test_join_batch.py::test_a_pass_answered_before_a_reset_is_not_written_into_the_new_queue",
        ),
    ),
    Mutation(
        "queue-pass-any-customer",
        "a signed pass is accepted from any customer (its customer not compared)",
        "waitingroom/passtoken.py",
        "pass_verify",
        "signed.customer_id != customer_id or ",
        "",
        ("waitingroom/tests/test_signed_pass.py::test_another_customers_pass_is_refused",),
    ),
    Mutation(
        "queue-pass-outlives-its-queue",
        "a signed pass of the product's earlier queue (since reset) is not refused",
        "waitingroom/selectors.py",
        "pass_poll",
        "raise QueuePassOutdated(pass_id=signed.pass_id)",
        "pass",
        (
            "waitingroom/tests/test_signed_pass.py::"
            "test_a_pass_of_the_products_earlier_queue_is_gone_once_the_queue_is_reset",
        ),
    ),
    Mutation(
        "queue-pass-any-queues-counters",
        "a signed pass is answered from whatever queue counters the process holds, of its own queue or not",
        "waitingroom/selectors.py",
        "pass_poll",
        "if counters is not None and signed.queue_created_us == counters.created_us:",
        "if counters is not None:",
        (
            "waitingroom/tests/test_signed_pass.py::"
            "test_a_pass_newer_than_the_counters_a_process_holds_is_answered_by_the_database",
            "waitingroom/tests/test_signed_pass.py::test_a_pass_signed_without_its_queue_is_polled_through_the_database",
        ),
    ),
    Mutation(
        "poll-placements-per-pass",
        "a pass signed before the opening reads its position from the database at its first poll (no placements)",
        "waitingroom/selectors.py",
        "pass_poll",
        "position = placed_position(product_id=signed.product_id, pass_id=signed.pass_id)",
        "position = None",
        (
            "waitingroom/tests/test_signed_pass.py::test_the_first_polls_after_the_opening_read_the_placements_once_per_process",
        ),
    ),
    Mutation(
        "queue-poll-unbounded",
        "poll_after has no upper bound (half the ETA however far)",
        "waitingroom/selectors.py",
        "poll_after_seconds",
        "return min(settings.QUEUE_POLL_MAX_SECONDS, max(",
        "return min(10**9, max(",
        (
            "waitingroom/tests/test_queue_api.py::test_a_client_that_obeys_poll_after_sees_its_admission_in_time_when_ops_raise_the_pace",
        ),
    ),
    Mutation(
        "queue-late-joiners-first",
        "everyone who joined between the opening and the first advance is placed ahead of the pre-opening crowd",
        "waitingroom/services.py",
        "PLACE_SQL",
        "ORDER BY NOT qp.early,",
        "ORDER BY qp.early,",
        (
            "waitingroom/tests/test_queue_rules.py::test_everyone_who_joined_before_the_opening_is_placed_ahead_of_everyone_who_joined_after_it",
        ),
    ),
    Mutation(
        "queue-credit-uncapped",
        "a long gap between advances becomes a burst beyond QUEUE_MAX_BURST_SECONDS of pace",
        "waitingroom/services.py",
        "earned_credit",
        "return min(cap, credit + pace * max(0.0, elapsed_seconds))",
        "return credit + pace * max(0.0, elapsed_seconds)",
        ("waitingroom/tests/test_queue_rules.py::test_a_long_gap_between_advances_admits_at_most_the_burst_cap",),
    ),
    Mutation(
        "queue-paused-admits-credit",
        "a paused queue still admits with the credit it had left over",
        "waitingroom/services.py",
        "queue_advance",
        "n = 0 if paused else max(",
        "n = max(",
        ("waitingroom/tests/test_queue_rules.py::test_a_paused_queue_admits_nobody_even_with_credit_left_over",),
    ),
    Mutation(
        "queue-admits-beyond-units",
        "admissions are not capped by the units available",
        "waitingroom/services.py",
        "queue_advance",
        "min(math.floor(credit), available - outstanding)",
        "min(math.floor(credit), 10**9 - outstanding)",
        (
            "waitingroom/tests/test_queue_rules.py::test_admissions_never_exceed_the_units_available_minus_those_outstanding",
        ),
    ),
    Mutation(
        "queue-outstanding-ignored",
        "admissions still outstanding do not count against the units available",
        "waitingroom/services.py",
        "queue_advance",
        "min(math.floor(credit), available - outstanding)",
        "min(math.floor(credit), available)",
        (
            "waitingroom/tests/test_queue_rules.py::test_admissions_never_exceed_the_units_available_minus_those_outstanding",
        ),
    ),
    Mutation(
        "queue-pass-waits-after-the-sale",
        "a waiting pass stays waiting after the sale ended instead of sold_out",
        "waitingroom/selectors.py",
        "PASS_STATE_SQL",
        "({SALE_STATE_SQL}) = '{SALE_ENDED}' OR",
        "false OR",
        (
            "waitingroom/tests/test_queue_rules.py::test_a_waiting_pass_is_sold_out_once_the_sale_ended_even_with_units_left",
        ),
    ),
    Mutation(
        "queue-rejoin-sold-out-409",
        "re-joining a sold-out queue answers 409 sold_out instead of the customer's pass",
        "waitingroom/services.py",
        "queue_join",
        "if signed is not None:",
        "if signed is not None and not counters.sold_out():",
        ("waitingroom/tests/test_queue_rules.py::test_rejoining_a_sold_out_queue_answers_the_customers_pass",),
    ),
    Mutation(
        "queue-admin-form-ignores-pause",
        "the queue admin's change form ignores a change of paused",
        "waitingroom/admin.py",
        "ProductQueueAdmin.save_model",
        'if not change or "paused" in form.changed_data:',
        "if not change:",
        ("waitingroom/tests/test_queue_rules.py::test_the_admin_change_form_pauses_and_resumes_the_queue",),
    ),
    Mutation(
        "queue-viewer-deletes",
        "an ops viewer (read-only) may delete a queue",
        "waitingroom/admin.py",
        "ProductQueueAdmin.has_delete_permission",
        'return request.user.has_perm("inventory.change_product")',
        "return self.has_view_permission(request)",
        ("waitingroom/tests/test_queue_rules.py::test_an_ops_viewer_cannot_delete_a_queue",),
    ),
    Mutation(
        "board-not-one-snapshot",
        "a sale-board refresh reads each statement on its own snapshot (READ COMMITTED)",
        "backoffice/saleboard.py",
        "_read_snapshot",
        "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY",
        "SET TRANSACTION ISOLATION LEVEL READ COMMITTED READ ONLY",
        ("backoffice/tests/test_saleboard.py::test_one_refresh_reads_one_snapshot",),
    ),
    Mutation(
        "board-queue-per-product",
        "the sale board's queue panel runs one statement per product",
        "backoffice/saleboard.py",
        "_read_snapshot",
        'queues = queue_states(product_ids=params["ids"])',
        'queues = [s for pid in params["ids"] for s in queue_states(product_ids=[pid])]',
        ("backoffice/tests/test_saleboard.py::test_one_refresh_is_a_fixed_number_of_statements_however_many_products",),
    ),
    Mutation(
        "migration-long-lock-wait",
        "migrate waits as long as a request for its locks (MIGRATION_LOCK_TIMEOUT_MS not applied)",
        "skincare/management/commands/migrate.py",
        "_apply_timeouts",
        'f"{settings.MIGRATION_LOCK_TIMEOUT_MS}ms"',
        '"5s"',
        ("skincare/tests/test_migrate_command.py::test_a_refused_lock_is_retried_once_the_table_is_free",),
    ),
    Mutation(
        "migration-no-retry",
        "a migration refused a lock is not tried again",
        "skincare/management/commands/migrate.py",
        "run_with_lock_retries",
        "if not is_lock_refused(error) or attempt == attempts:",
        "if True:",
        ("skincare/tests/test_migrate_command.py::test_a_refused_lock_is_retried_once_the_table_is_free",),
    ),
    Mutation(
        "midtrans-signature-unchecked",
        "a Midtrans notification is applied without verifying its signature_key",
        "payments/midtrans.py",
        "MidtransGateway.notification_read",
        "if not hmac.compare_digest(expected.encode(), signature_key.lower().encode()):",
        "if False:",
        (
            "payments/tests/test_midtrans.py::test_a_wrong_signature_changes_nothing_and_asks_nothing",
            "payments/tests/test_midtrans.py::test_a_notification_signed_over_another_amount_is_refused",
        ),
    ),
    Mutation(
        "xendit-token-unchecked",
        "a Xendit callback is applied whatever its x-callback-token",
        "payments/xendit.py",
        "XenditGateway.notification_read",
        "if not hmac.compare_digest(token.encode(), self.callback_token.encode()):",
        "if False:",
        (
            "payments/tests/test_xendit.py::test_a_wrong_or_missing_token_changes_nothing_and_asks_nothing",
            "payments/tests/test_gateway_seam.py::test_an_unverified_notification_changes_nothing_and_asks_nothing",
        ),
    ),
    Mutation(
        "xendit-expire-skipped",
        "a pending Xendit invoice is left open when the shop closes its transaction (cancel, sweeper, new attempt)",
        "payments/xendit.py",
        "XenditGateway.transaction_expire",
        'if invoice.get("status") != "PENDING":',
        "if True:",
        (
            "payments/tests/test_gateway_seam.py::test_a_cancel_closes_the_gateways_transaction",
            "payments/tests/test_gateway_seam.py::test_the_sweeper_expires_an_open_transaction_before_the_order",
            "payments/tests/test_xendit.py::test_a_lost_answer_then_a_new_visit_leaves_one_live_invoice",
        ),
    ),
    Mutation(
        "rate-limit-trips-the-breaker",
        "a gateway's 429 counts as a failure of the gateway, so the breaker stops asking a gateway that is up",
        "payments/boundary.py",
        "Boundary.call",
        """except GatewayRateLimited:  # the gateway answered: up, and asking to be asked more slowly
            self._record(breaker, ok=True, trial=trial)""",
        """except GatewayRateLimited:
            self._record(breaker, ok=False, trial=trial)""",
        ("payments/tests/test_xendit.py::test_a_429_is_a_503_with_the_wait_and_the_next_visit_creates_one_invoice",),
    ),
    Mutation(
        "page-pace-not-held",
        "a payment page's turn is booked now whatever was booked before it, so every process creates pages at once",
        "payments/sessions.py",
        "SESSION_TURN_BOOK_SQL",
        "SET next_at = greatest(p.next_at, clock_timestamp()) + make_interval",
        "SET next_at = clock_timestamp() + make_interval",
        ("payments/tests/test_session_pace.py::test_visitors_at_the_same_instant_each_get_a_turn_of_their_own",),
    ),
    Mutation(
        "page-turn-not-kept",
        "a visit refused for the pace keeps no turn, so it queues again at the back when it returns",
        "payments/sessions.py",
        "SESSION_TURN_BOOK_SQL",
        "SELECT %(order)s, turn_at FROM later WHERE wait > 0",
        "SELECT %(order)s, turn_at FROM later WHERE false",
        ("payments/tests/test_session_pace.py::test_a_refused_visit_comes_back_to_its_own_turn_and_spends_it",),
    ),
    Mutation(
        "page-turn-kept-however-late",
        "a visit long after its booked turn still uses it, bunching with the turns booked after it",
        "payments/sessions.py",
        "SESSION_TURN_BOOK_SQL",
        "AND turn_at > clock_timestamp() - make_interval(secs => %(late)s)",
        "AND %(late)s IS NOT NULL",
        ("payments/tests/test_session_pace.py::test_a_visit_long_after_its_turn_books_again",),
    ),
    Mutation(
        "page-turn-not-spent",
        "a booked turn serves every later visit of its order, so retries after a failure skip the pace",
        "payments/sessions.py",
        "session_turn_take",
        "cursor.execute(SESSION_TURN_SPEND_SQL, [order_id])",
        "pass",
        ("payments/tests/test_session_pace.py::test_a_refused_visit_comes_back_to_its_own_turn_and_spends_it",),
    ),
    Mutation(
        "booked-turns-not-backed-off",
        "a gateway's 429 leaves the booked turns where they were, so their visits ask the gateway during its wait",
        "payments/sessions.py",
        "session_pace_back_off",
        'cursor.execute(SESSION_TURNS_BACK_OFF_SQL, {"wait": wait_seconds})',
        "pass",
        ("payments/tests/test_session_pace.py::test_a_gateway_429_moves_the_next_turn_on_by_its_wait",),
    ),
    Mutation(
        "page-pace-not-asked",
        "a payment page is created without taking a turn",
        "payments/sessions.py",
        "payment_session_open",
        "session_turn_take(gw, order_id=order_id)",
        "pass",
        ("payments/tests/test_session_pace.py::test_a_visit_whose_turn_has_not_come_asks_the_gateway_nothing",),
    ),
    Mutation(
        "gateway-429-not-backed-off",
        "a gateway's 429 leaves the pace as it was, so the next visit asks the gateway again at once",
        "payments/sessions.py",
        "payment_session_open",
        "session_pace_back_off(gw, wait_seconds=exc.retry_after)",
        "pass",
        ("payments/tests/test_session_pace.py::test_a_gateway_429_moves_the_next_turn_on_by_its_wait",),
    ),
    Mutation(
        "queue-pace-above-page-rate",
        "a queue admits buyers faster than their payment pages can be created",
        "waitingroom/services.py",
        "queue_pace_check",
        "and admit_per_second > pages:",
        "and False:",
        ("payments/tests/test_session_pace.py::test_a_queue_pace_above_the_page_rate_is_refused_where_it_is_set",),
    ),
    Mutation(
        "payment-link-never-expires",
        "a payment link is accepted however long after its order's deadline",
        "payments/links.py",
        "Link.expired",
        "return now > self.until + timedelta(seconds=LINK_GRACE_SECONDS)",
        "return False",
        ("payments/tests/test_sandbox.py::test_sandbox_links_act_only_on_the_callers_own_order",),
    ),
    Mutation(
        "payment-link-signed-when-asked",
        "a payment link carries the instant it was signed, so a replayed checkout answers another link",
        "payments/links.py",
        "link_sign",
        "return signing.Signer(salt=salt).sign_object(payload)",
        'return signing.Signer(salt=salt).sign_object({**payload, "at": signing.time.time()})',
        ("payments/tests/test_sandbox.py::test_every_answer_that_shows_the_order_shows_the_same_link",),
    ),
    Mutation(
        "reconcile-not-paced",
        "reconciliation asks the gateway about every order at once, past its rate limit",
        "payments/sessions.py",
        "CallPace.__init__",
        "self.spacing = 1 / rate if rate else 0.0",
        "self.spacing = 0.0",
        (
            "payments/tests/test_session_pace.py::test_reconciliation_asks_within_the_gateways_limit_and_again_after_a_429",
        ),
    ),
    Mutation(
        "reconcile-429-not-asked-again",
        "an order the gateway refused for its rate limit is reported unreachable instead of asked again",
        "payments/sessions.py",
        "CallPace.status_get",
        "if tries == RATE_LIMITED_TRIES:",
        "if True:",
        (
            "payments/tests/test_session_pace.py::test_reconciliation_asks_within_the_gateways_limit_and_again_after_a_429",
        ),
    ),
    Mutation(
        "reconcile-never-unmarks",
        "an order stays to reconcile after the gateway answered for it with nothing to mend",
        "payments/sessions.py",
        "payments_reconcile",
        "cursor.execute(RECONCILED_SQL, [reconciled])",
        "pass",
        (
            "payments/tests/test_gateway_seam.py::test_reconcile_unmarks_an_order_once_the_gateway_answers_with_nothing_to_mend",
        ),
    ),
    Mutation(
        "reconcile-unmarks-a-refund",
        "an order with money to return is no longer counted to reconcile once reconcile_payments has seen it",
        "payments/sessions.py",
        "payments_reconcile",
        """if not wrong:
            reconciled.append(order_id)""",
        "reconciled.append(order_id)",
        (
            "payments/tests/test_gateway_seam.py::test_reconcile_shows_money_taken_for_a_cancelled_order_as_a_refund_to_make",
        ),
    ),
    Mutation(
        "payment-page-waits-as-json",
        "a browser waiting for its payment page gets the JSON error, a page that never asks again",
        "payments/api.py",
        "PaymentPageApi.get",
        "return page_that_waits(request.http, exc)",
        "raise",
        (
            "payments/tests/test_session_pace.py::test_a_browser_waiting_for_its_turn_gets_a_page_that_asks_again_by_itself",
        ),
    ),
    Mutation(
        "notification-of-any-gateway",
        "a notification is read by the configured gateway whichever gateway's endpoint it was posted to",
        "payments/sessions.py",
        "notification_apply",
        "if gw.name != gateway_name:",
        "if False:",
        ("payments/tests/test_gateway_seam.py::test_a_notification_to_the_other_gateways_endpoint_is_refused",),
    ),
    Mutation(
        "midtrans-no-expiry-margin",
        "the gateway's page ends at the order's deadline, not the safety margin before it",
        "payments/sessions.py",
        "session_ends_at",
        "payment_expires_at - gw.expiry_margin",
        "payment_expires_at",
        (
            "payments/tests/test_midtrans.py::test_payment_url_opens_one_snap_session_that_ends_before_the_deadline_and_is_reused",
            "payments/tests/test_midtrans.py::test_no_session_when_less_than_the_margin_is_left",
            "payments/tests/test_gateway_seam.py::test_one_page_per_order_reused_and_none_at_checkout",
            "payments/tests/test_xendit.py::test_the_invoice_is_named_by_the_attempt_and_ends_the_margin_before_the_deadline",
        ),
    ),
    Mutation(
        "snap-retry-reuses-order-id",
        "every Snap attempt of an order sends the same order_id, which Midtrans refuses after a lost answer",
        "payments/sessions.py",
        "payment_session_open",
        'gateway_order_id = f"{order_id}-{secrets.token_hex(4)}"',
        "gateway_order_id = str(order_id)",
        ("payments/tests/test_midtrans.py::test_a_retry_after_a_lost_snap_answer_opens_a_new_transaction",),
    ),
    Mutation(
        "notification-matched-by-prefix",
        "a notification's gateway order id is read as <order>-<anything> instead of looked up among the ids issued",
        "payments/sessions.py",
        "notification_apply",
        "order_id = issued_order(gateway_order_id=gateway_order_id)",
        'order_id = int(gateway_order_id.partition("-")[0])',
        (
            "payments/tests/test_notification_matching.py::test_money_for_a_transaction_the_shop_did_not_issue_pays_no_order_and_needs_ops",
            "payments/tests/test_notification_matching.py::test_the_bare_order_id_is_not_the_orders_transaction",
            "payments/tests/test_payment_chaos.py::test_every_order_ends_paid_once_or_cancelled_while_the_gateway_misbehaves",
        ),
    ),
    Mutation(
        "unmatched-money-ignored",
        "money for a transaction the shop did not issue is answered `ignored` and recorded nowhere",
        "payments/sessions.py",
        "notification_apply",
        "if status.status != gateway.SETTLED:",
        "if True:",
        (
            "payments/tests/test_notification_matching.py::test_money_for_a_transaction_the_shop_did_not_issue_pays_no_order_and_needs_ops",
        ),
    ),
    Mutation(
        "sequences-not-advanced",
        "after a restore the id sequences stay where the restore left them (the gap is not added)",
        "skincare/services.py",
        "SEQUENCES_ADVANCE_SQL",
        "COALESCE(s.last_value, 0) + %s",
        "COALESCE(s.last_value, 0) + 0 * %s",
        ("skincare/tests/test_sequences_advance.py::test_after_a_restore_no_order_or_attempt_id_is_issued_twice",),
    ),
    Mutation(
        "payment-link-logged",
        "the signed Midtrans payment link is printed in the logs (only the sandbox's link is redacted)",
        "skincare/logs.py",
        "SECRET_PATH_PREFIXES",
        '("/v1/payments/sandbox/", "/v1/payments/pay/")',
        '("/v1/payments/sandbox/",)',
        ("payments/tests/test_midtrans.py::test_the_signed_payment_link_never_reaches_a_log",),
    ),
    Mutation(
        "midtrans-plain-http-accepted",
        "production accepts a Midtrans base URL that is not https:// (the server key in clear)",
        "payments/checks.py",
        "midtrans_settings",
        'plain = [url for url in urls if not url.lower().startswith("https://")]',
        "plain = []",
        ("payments/tests/test_midtrans.py::test_production_refuses_a_published_key_and_the_sandbox_unless_asked_for",),
    ),
    Mutation(
        "ops-cancel-leaves-gateway-open",
        "the admin's Cancel action cancels the order but leaves its Midtrans page payable",
        "payments/admin.py",
        "OrderPaymentsAdmin.cancel_order",
        "sessions.session_close_after_cancel(order_id=order_id)",
        "pass",
        ("payments/tests/test_ops_cancel_closes_gateway.py::test_the_admins_cancel_closes_the_gateway_transaction",),
    ),
    Mutation(
        "setup-cancel-leaves-gateway-open",
        "flash_sale_setup cancels the pending orders but leaves their Midtrans pages payable",
        "backoffice/management/commands/flash_sale_setup.py",
        "_cancel_pending_orders",
        "sessions.session_close_after_cancel(order_id=order_id)",
        "pass",
        (
            "payments/tests/test_ops_cancel_closes_gateway.py::test_flash_sale_setup_closes_the_gateway_transaction_of_every_order_it_cancels",
        ),
    ),
    Mutation(
        "fractional-price-accepted",
        "with Midtrans the catalogue accepts a price with a fraction the gateway cannot charge",
        "inventory/catalogue.py",
        "price_problem",
        "if rule is not None and value != value.to_integral_value():",
        "if False:",
        (
            "inventory/tests/test_whole_prices.py::test_with_midtrans_a_price_with_a_fraction_is_refused_in_the_admin",
            "inventory/tests/test_whole_prices.py::test_with_midtrans_the_catalogue_refuses_a_price_or_sale_price_with_a_fraction",
        ),
    ),
    Mutation(
        "snap-amount-truncated",
        "Snap is asked for int(total): a total with a fraction is charged truncated",
        "payments/midtrans.py",
        "MidtransGateway.session_create",
        "if amount != amount.to_integral_value():",
        "if False:",
        ("payments/tests/test_midtrans.py::test_a_total_with_a_fraction_is_never_charged_rounded",),
    ),
    Mutation(
        "gateway-no-whole-call-deadline",
        "a gateway call waits as long as each read is answered in time (no deadline for the whole call)",
        "payments/boundary.py",
        "Boundary.call",
        "result = future.result(timeout=deadline)",
        "result = future.result()",
        ("payments/tests/test_gateway_boundary.py::test_a_gateway_that_drips_its_answer_is_given_up_at_the_deadline",),
    ),
    Mutation(
        "gateway-no-breaker",
        "the gateway is asked again and again after repeated failures (no circuit breaker)",
        "payments/boundary.py",
        "Boundary._admit",
        "if breaker.failures >= self.breaker_failures:",
        "if False:",
        (
            "payments/tests/test_gateway_boundary.py::test_after_repeated_failures_the_gateway_is_not_asked_and_then_tried_again",
            "payments/tests/test_gateway_boundary.py::test_a_dead_gateway_costs_one_sweep_a_few_questions_and_every_unit_comes_back[protected]",
        ),
    ),
    Mutation(
        "gateway-failed-trial-closes",
        "the one call let through after the pause closes the breaker even when the gateway did not answer it",
        "payments/boundary.py",
        "Boundary._record",
        "breaker.failures += 1",
        "breaker.failures = 0 if trial else breaker.failures + 1",
        (
            "payments/tests/test_gateway_boundary.py::test_after_repeated_failures_the_gateway_is_not_asked_and_then_tried_again",
        ),
    ),
    Mutation(
        "gateway-no-bulkhead",
        "a process sends any number of calls to a stalled gateway at once (no bulkhead)",
        "payments/boundary.py",
        "Boundary._admit",
        "if self._in_flight >= self.max_calls:",
        "if False:",
        ("payments/tests/test_gateway_boundary.py::test_calls_past_the_bulkhead_are_refused_at_once",),
    ),
    Mutation(
        "earlier-attempt-left-open",
        "a new Snap attempt is created while the order's earlier one may still be live at the gateway",
        "payments/sessions.py",
        "payment_session_open",
        "_earlier_attempts_close(gw, order_id=order_id, keep=gateway_order_id)",
        "pass",
        (
            "payments/tests/test_one_live_transaction.py::test_a_new_attempt_is_created_only_after_the_earlier_one_is_closed_at_the_gateway",
            "payments/tests/test_one_live_transaction.py::test_an_earlier_attempt_that_was_paid_pays_the_order_and_no_new_page_is_made",
        ),
    ),
    Mutation(
        "sweeper-asks-only-the-newest-transaction",
        "the sweeper asks only about the order's newest gateway transaction, not every one it had",
        "payments/sessions.py",
        "sessions_check_due",
        "for gateway_order_id in open_ids:",
        "for gateway_order_id in open_ids[-1:]:",
        ("payments/tests/test_one_live_transaction.py::test_the_sweeper_asks_about_every_transaction_the_order_had",),
    ),
    Mutation(
        "sweep-asks-one-at-a-time",
        "the sweeper asks the gateway about its due orders one at a time",
        "payments/sessions.py",
        "_statuses_ask",
        "max_workers=settings.GATEWAY_MAX_CALLS",
        "max_workers=1",
        ("payments/tests/test_gateway_boundary.py::test_the_sweeper_asks_its_questions_at_once[4]",),
    ),
    Mutation(
        "sweep-unbounded",
        "a sweep waits for every question to the gateway however long it takes (no bound on the sweep)",
        "payments/sessions.py",
        "_statuses_ask",
        "timeout=settings.GATEWAY_SWEEP_SECONDS",
        "timeout=None",
        ("payments/tests/test_gateway_boundary.py::test_a_sweep_waits_for_the_gateway_no_longer_than_its_bound",),
    ),
    Mutation(
        "midtrans-signature-prefix",
        "a notification whose signature_key is any prefix of the right one (even empty) is accepted",
        "payments/midtrans.py",
        "MidtransGateway.notification_read",
        "if not hmac.compare_digest(expected.encode(), signature_key.lower().encode()):",
        "if not expected.startswith(signature_key.lower()):",
        ("payments/tests/test_midtrans_refusals.py::test_a_prefix_of_the_right_signature_is_refused",),
    ),
    Mutation(
        "midtrans-signature-without-status-code",
        "the notification's digest is computed without its status_code",
        "payments/midtrans.py",
        "signature",
        'f"{order_id}{status_code}{gross_amount}{server_key}"',
        'f"{order_id}{gross_amount}{server_key}"',
        (
            "payments/tests/test_midtrans_refusals.py::test_a_notification_signed_by_the_documented_formula_is_read",
            "payments/tests/test_midtrans_refusals.py::test_a_digest_without_the_status_code_is_refused",
        ),
    ),
    Mutation(
        "midtrans-empty-key-verifies",
        "with no server key configured a notification signed over the empty key is accepted",
        "payments/midtrans.py",
        "MidtransGateway.notification_read",
        "if not self.server_key:",
        "if False:",
        ("payments/tests/test_midtrans_refusals.py::test_an_empty_server_key_verifies_nothing",),
    ),
    Mutation(
        "midtrans-status-of-another-order",
        "a status answer about another transaction is taken as the answer",
        "payments/midtrans.py",
        "MidtransGateway.status_get",
        'if str(data.get("order_id")) != str(order_id) or not amount.is_finite():',
        "if not amount.is_finite():",
        ("payments/tests/test_midtrans_refusals.py::test_a_status_answer_about_another_transaction_is_no_answer",),
    ),
    Mutation(
        "midtrans-expire-refusal-done",
        "an expire the gateway refused is taken as done",
        "payments/midtrans.py",
        "MidtransGateway.transaction_expire",
        'if code not in ("200", "407", "404", "412"):',
        'if code == "":',
        ("payments/tests/test_midtrans_refusals.py::test_an_expire_the_gateway_refused_is_not_done",),
    ),
    Mutation(
        "unknown-notification-ignored",
        "a signed notification for a transaction the status API does not know is acknowledged as ignored (never retried)",
        "payments/sessions.py",
        "notification_apply",
        'raise GatewayUnavailable(f"The gateway has no transaction {gateway_order_id} yet.")',
        "return None, IGNORED",
        (
            "payments/tests/test_midtrans_refusals.py::test_a_notification_the_gateway_does_not_know_yet_is_retried_not_ignored",
        ),
    ),
    Mutation(
        "claim-takes-over-live-claim",
        "a payment page visit takes over the claim of a visit still asking Snap",
        "payments/sessions.py",
        "CLAIM_SESSION_SQL",
        "AND payment_sessions.created_at < now() - make_interval(secs => %s)",
        "AND payment_sessions.created_at < now() + make_interval(secs => %s)",
        ("payments/tests/test_midtrans_refusals.py::test_a_live_claim_is_not_taken_over",),
    ),
    Mutation(
        "reclaim-keeps-old-gateway-id",
        "a claim taken over keeps the dead visit's gateway order id while Snap is asked for a new one",
        "payments/sessions.py",
        "CLAIM_SESSION_SQL",
        "ends_at = EXCLUDED.ends_at, gateway_order_id = EXCLUDED.gateway_order_id",
        "ends_at = EXCLUDED.ends_at",
        ("payments/tests/test_midtrans_refusals.py::test_a_claim_taken_over_names_the_new_transaction",),
    ),
    Mutation(
        "reconcile-ignores-currency",
        "reconciliation compares the amount settled but not its currency",
        "payments/sessions.py",
        "_order_mismatches",
        "if there.amount != total or there.currency != currency:",
        "if there.amount != total:",
        ("payments/tests/test_midtrans_refusals.py::test_reconcile_sees_a_settlement_in_another_currency",),
    ),
    Mutation(
        "signed-poll-ignores-sold-out",
        "a placed pass's signed poll keeps waiting after the product sold out",
        "waitingroom/selectors.py",
        "pass_poll",
        "if counters.sold_out():",
        "if False:",
        ("waitingroom/tests/test_poll_refusals.py::test_a_placed_signed_pass_sees_the_product_sold_out",),
    ),
    Mutation(
        "signed-poll-ignores-sold-out-before-opening",
        "a signed poll before the opening keeps waiting after the product sold out",
        "waitingroom/selectors.py",
        "pass_poll",
        "waiting = WAITING if not counters.sold_out() else SOLD_OUT",
        "waiting = WAITING",
        ("waitingroom/tests/test_poll_refusals.py::test_a_signed_pass_before_the_opening_sees_the_product_sold_out",),
    ),
    Mutation(
        "opening-polls-not-spread",
        "every pass that joined before the opening polls again in the same second after it",
        "waitingroom/selectors.py",
        "poll_before_opening_seconds",
        "spread = random.random() * settings.QUEUE_POLL_MAX_SECONDS",
        "spread = 0.0",
        ("waitingroom/tests/test_poll_refusals.py::test_the_first_polls_after_the_opening_are_spread",),
    ),
    Mutation(
        "pass-cookie-not-secure",
        "the queue pass cookie is sent over plain HTTP in production",
        "waitingroom/api.py",
        "set_pass_cookie",
        "secure=not settings.DEBUG",
        "secure=False",
        ("waitingroom/tests/test_poll_refusals.py::test_the_pass_cookie_is_sent_only_over_https_in_production",),
    ),
    Mutation(
        "sweepers-lease-blind",
        "a sweeper leases due orders another sweeper is already asking the gateway about, and asks again",
        "payments/sessions.py",
        "DUE_SESSIONS_LEASE_SQL",
        "AND (s.sweep_lease_until IS NULL OR s.sweep_lease_until <= now())",
        "",
        ("payments/tests/test_sweepers_share.py::test_two_sweepers_never_ask_about_or_cancel_the_same_order[leased]",),
    ),
    Mutation(
        "sweeper-cancels-leased-elsewhere",
        "a sweeper cancels the due orders another sweeper is asking the gateway about",
        "backoffice/management/commands/expire_reservations.py",
        "Command.sweep",
        "skip=check.elsewhere",
        "skip=()",
        ("payments/tests/test_sweepers_share.py::test_two_sweepers_never_ask_about_or_cancel_the_same_order[leased]",),
    ),
    Mutation(
        "sweeper-cancels-past-what-it-asked",
        "with more due orders than one check asks about, the sweeper cancels them all (due_by is now, not the last "
        "deadline it asked about)",
        "payments/sessions.py",
        "sessions_check_due",
        "check = SessionCheck(due_by=leased[-1][1], more=True, elsewhere=elsewhere)",
        "check = SessionCheck(due_by=now, more=True, elsewhere=elsewhere)",
        ("payments/tests/test_sweepers_share.py::test_a_sweep_in_small_batches_cancels_only_what_it_asked_about",),
    ),
    Mutation(
        "sweeper-asks-no-gateway",
        "the sweeper cancels orders with a gateway session without asking the status API",
        "payments/sessions.py",
        "_statuses_ask",
        "answers[gateway_order_id] = future.result()",
        "answers[gateway_order_id] = None",
        (
            "payments/tests/test_midtrans.py::test_the_sweeper_recovers_a_lost_notification",
            "payments/tests/test_midtrans.py::test_the_sweeper_expires_an_open_transaction_first_then_the_order",
        ),
    ),
    Mutation(
        "pooled-role-timeouts-not-set",
        "migrate leaves the role's timeouts unset: behind PgBouncer reads run unbounded",
        "skincare/management/commands/migrate.py",
        "Command.handle",
        'if not (options["plan"] or options["check_unapplied"]):',
        "if False:",
        (
            "skincare/tests/test_migrate_command.py::test_migrate_sets_the_roles_timeouts_in_the_database_from_the_settings",
        ),
    ),
    Mutation(
        "pooled-unbounded-accepted",
        "the start-up check accepts a pooled connection without any timeout (0)",
        "skincare/checks.py",
        "pooled_connection_timeouts",
        "if found == 0 or found > wanted",
        "if found > wanted",
        (
            "skincare/tests/test_db_timeouts.py::test_a_pooled_process_refuses_a_connection_without_bounds_or_with_looser_ones",
        ),
    ),
    Mutation(
        "read-timeout-is-500",
        "a read cut by a lock or statement timeout outside any service answers 500, not 503 busy",
        "skincare/api.py",
        "outage_error",
        "if is_busy(exc):",
        "if False:",
        ("skincare/tests/test_db_timeouts.py::test_a_read_cut_by_a_timeout_outside_any_service_is_503_busy",),
    ),
    Mutation(
        "webhook-currency-case-sensitive",
        "a payment event's currency in lower case is refused (400, no record)",
        "payments/api.py",
        "parse_webhook",
        '"currency": currency.upper(),',
        '"currency": currency,',
        ("payments/tests/test_webhook.py::test_a_currency_code_in_any_case_is_that_code",),
    ),
    Mutation(
        "sale-report-revenue-across-currencies",
        "sale_report adds revenue across currencies",
        "backoffice/sale_report.py",
        "_count_orders",
        'report.revenue[currency] = report.revenue.get(currency, Decimal("0.00")) + amount',
        'report.revenue["IDR"] = report.revenue.get("IDR", Decimal("0.00")) + amount',
        ("backoffice/tests/test_sale_report.py::test_revenue_is_one_sum_per_currency_never_added_across",),
    ),
    Mutation(
        "currency-restamp-every-idr-order",
        "the currency data migration re-stamps orders written after 0004 too",
        "orders/migrations/0006_order_currency_from_setting.py",
        "RESTAMP_SQL",
        "AND created_at <",
        "AND now() >",
        ("orders/tests/test_currency_migration.py::test_only_the_orders_0004_stamped_take_the_shops_currency",),
    ),
    Mutation(
        "openapi-line-qty-unbounded",
        "the OpenAPI document no longer states a line's qty maximum (CHECKOUT_MAX_QTY)",
        "carts/schemas.py",
        "CheckoutItemSerializer",
        "max_value=settings.CHECKOUT_MAX_QTY,",
        "",
        ("payments/tests/test_openapi_limits.py::test_the_cart_limits_are_stated",),
    ),
    Mutation(
        "webhook-amount-any-decimal",
        "the webhook takes any decimal string Python reads (exponents, spaces, underscores), not the stated pattern",
        "payments/api.py",
        "parse_webhook",
        "isinstance(amount, str) and AMOUNT.fullmatch(amount)",
        "isinstance(amount, str) and amount.strip()",
        ("payments/tests/test_openapi_limits.py::test_the_webhook_validation_agrees_with_each_stated_pattern",),
    ),
    Mutation(
        "front-queue-unbounded",
        "the front's queue timeout is not the bound: a request waits a minute for a worker instead of a fast 503",
        "deploy/haproxy/haproxy.cfg.template",
        MODULE,
        "timeout queue ${queue_timeout_ms}ms",
        "timeout queue 60s",
        (
            "skincare/tests/test_front_sheds.py::"
            "test_a_request_that_cannot_start_within_the_bound_gets_the_fronts_503_with_retry_after",
        ),
    ),
    Mutation(
        "guard-add-without-column",
        "the migration guard reads ADD without COLUMN as no column (a volatile default passes)",
        "devtools/migration_guard.py",
        "_alter_rules",
        "return _column_rules(rest)",
        'return _column_rules(rest) if action[1] == "COLUMN" else []',
        (
            "skincare/tests/test_migration_guard.py::test_a_hand_written_spelling_that_rewrites_or_locks_orders_is_refused",
            "skincare/tests/test_migration_guard.py::test_control_the_naive_matcher_lets_the_same_spelling_through",
        ),
    ),
    Mutation(
        "guard-vacuum-option-list",
        "the migration guard misses VACUUM (FULL) written as an option list",
        "devtools/migration_guard.py",
        "check_statements",
        'full = _option_on(options, "FULL") or statement[at : at + 1] == ["FULL"]',
        'full = statement[at : at + 1] == ["FULL"]',
        (
            "skincare/tests/test_migration_guard.py::test_a_hand_written_spelling_that_rewrites_or_locks_orders_is_refused",
            "skincare/tests/test_migration_guard.py::test_control_the_naive_matcher_lets_the_same_spelling_through",
        ),
    ),
    Mutation(
        "guard-reindex",
        "the migration guard lets a REINDEX without CONCURRENTLY through",
        "devtools/migration_guard.py",
        "check_statements",
        "if not concurrently:",
        "if False:",
        (
            "skincare/tests/test_migration_guard.py::test_a_hand_written_spelling_that_rewrites_or_locks_orders_is_refused",
            "skincare/tests/test_migration_guard.py::test_control_the_naive_matcher_lets_the_same_spelling_through",
            "skincare/tests/test_migration_guard.py::test_each_rule_refuses_its_statement_and_passes_its_safe_twin",
        ),
    ),
    Mutation(
        "guard-truncate",
        "the migration guard lets TRUNCATE through",
        "devtools/migration_guard.py",
        "check_statements",
        'elif head in ("LOCK", "TRUNCATE"):',
        'elif head in ("LOCK",):',
        (
            "skincare/tests/test_migration_guard.py::test_a_hand_written_spelling_that_rewrites_or_locks_orders_is_refused",
            "skincare/tests/test_migration_guard.py::test_control_the_naive_matcher_lets_the_same_spelling_through",
        ),
    ),
    Mutation(
        "guard-lock-table",
        "the migration guard lets LOCK TABLE through",
        "devtools/migration_guard.py",
        "check_statements",
        'elif head in ("LOCK", "TRUNCATE"):',
        'elif head in ("TRUNCATE",):',
        ("skincare/tests/test_migration_guard.py::test_each_rule_refuses_its_statement_and_passes_its_safe_twin",),
    ),
    Mutation(
        "guard-cluster",
        "the migration guard lets CLUSTER through",
        "devtools/migration_guard.py",
        "check_statements",
        'elif head == "CLUSTER":',
        'elif head == "CLUSTER" and False:',
        ("skincare/tests/test_migration_guard.py::test_each_rule_refuses_its_statement_and_passes_its_safe_twin",),
    ),
    Mutation(
        "guard-unnamed-constraint",
        "the migration guard reads an unnamed ADD UNIQUE / ADD CHECK as a column",
        "devtools/migration_guard.py",
        "_alter_rules",
        "if rest[:1] and rest[0] in CONSTRAINT_KINDS:",
        "if False:",
        ("skincare/tests/test_migration_guard.py::test_each_rule_refuses_its_statement_and_passes_its_safe_twin",),
    ),
    Mutation(
        "guard-comment-in-statement",
        "the migration guard reads a comment's words as SQL (CREATE /* x */ INDEX is not an index)",
        "devtools/migration_guard.py",
        "tokens",
        'if kind == "block_comment":',
        'if kind == "block_comment" and False:',
        (
            "skincare/tests/test_migration_guard.py::test_a_hand_written_spelling_that_rewrites_or_locks_orders_is_refused",
            "skincare/tests/test_migration_guard.py::test_control_the_naive_matcher_lets_the_same_spelling_through",
        ),
    ),
    Mutation(
        "guard-write-behind-cte",
        "the migration guard misses an UPDATE / DELETE behind a WITH",
        "devtools/migration_guard.py",
        "_writes",
        'if statement[0] not in (*WRITE_VERBS, "WITH"):',
        "if statement[0] not in WRITE_VERBS:",
        (
            "skincare/tests/test_migration_guard.py::test_a_hand_written_spelling_that_rewrites_or_locks_orders_is_refused",
            "skincare/tests/test_migration_guard.py::test_control_the_naive_matcher_lets_the_same_spelling_through",
            "skincare/tests/test_migration_guard.py::test_each_rule_refuses_its_statement_and_passes_its_safe_twin",
        ),
    ),
    Mutation(
        "guard-insert-select",
        "the migration guard lets INSERT ... SELECT into an existing table through",
        "devtools/migration_guard.py",
        "_writes",
        'if verb == "INSERT" and "SELECT" not in statement[i:]:',
        'if verb == "INSERT":',
        ("skincare/tests/test_migration_guard.py::test_each_rule_refuses_its_statement_and_passes_its_safe_twin",),
    ),
    Mutation(
        "guard-inline-check-references",
        "the migration guard lets an inline CHECK / REFERENCES on an added column through",
        "devtools/migration_guard.py",
        "_column_rules",
        'if "CHECK" in column or "REFERENCES" in column:',
        "if False:",
        ("skincare/tests/test_migration_guard.py::test_each_rule_refuses_its_statement_and_passes_its_safe_twin",),
    ),
    Mutation(
        "guard-validating-foreign-key",
        "the migration guard lets a validating FOREIGN KEY through",
        "devtools/migration_guard.py",
        "_constraint_rules",
        'if constraint[0] in ("CHECK", "FOREIGN") and not _has(constraint, "NOT", "VALID"):',
        'if constraint[0] in ("CHECK",) and not _has(constraint, "NOT", "VALID"):',
        ("skincare/tests/test_migration_guard.py::test_each_rule_refuses_its_statement_and_passes_its_safe_twin",),
    ),
    Mutation(
        "guard-procedural-code",
        "the migration guard lets a DO block or CALL through",
        "devtools/migration_guard.py",
        "check_statements",
        'elif head in ("DO", "CALL"):',
        'elif head in ("DO", "CALL") and False:',
        ("skincare/tests/test_migration_guard.py::test_procedural_code_the_guard_cannot_read_is_refused",),
    ),
    Mutation(
        "guard-copy-from",
        "the migration guard lets COPY ... FROM into an existing table through",
        "devtools/migration_guard.py",
        "check_statements",
        'elif head == "COPY" and "FROM" in statement:',
        'elif head == "COPY" and False:',
        ("skincare/tests/test_migration_guard.py::test_each_rule_refuses_its_statement_and_passes_its_safe_twin",),
    ),
    Mutation(
        "guard-python-unreported",
        "the migration guard reports nothing for a RunPython",
        "devtools/migration_guard.py",
        "_python_operations",
        "if line == NOT_SQL_MARKER and not described.startswith(SAFE_PYTHON_PREFIXES):",
        "if False:",
        ("skincare/tests/test_migration_guard.py::test_a_data_migration_in_python_is_reported_and_never_run",),
    ),
    Mutation(
        "guard-runs-python",
        "the migration guard calls a RunPython while collecting its SQL",
        "devtools/migration_guard.py",
        "migration_sql",
        "if not database_operation.reduces_to_sql:",
        "if False:",
        ("skincare/tests/test_migration_guard.py::test_a_data_migration_in_python_is_reported_and_never_run",),
    ),
    Mutation(
        "guard-runs-nested-python",
        "the migration guard runs SeparateDatabaseAndState's database operations, Python included",
        "devtools/migration_guard.py",
        "_database_operations",
        'inner = getattr(operation, "database_operations", None)',
        "inner = None",
        ("skincare/tests/test_migration_guard.py::test_a_data_migration_in_python_is_reported_and_never_run",),
    ),
    Mutation(
        "guard-collect-writes",
        "a write sent while the migration guard collects reaches the database",
        "devtools/migration_guard.py",
        "_refuse_writes",
        'if tokens(sql)[:1] != ["SELECT"]:',
        "if False:",
        ("skincare/tests/test_migration_guard.py::test_a_write_while_collecting_is_refused_and_leaves_nothing",),
    ),
    Mutation(
        "data-migration-batches-in-one-transaction",
        "RunInBatches runs inside an atomic migration (every batch in one transaction)",
        "skincare/data_migrations.py",
        "RunInBatches._run",
        "if connection.in_atomic_block:",
        "if False:",
        (
            "skincare/tests/test_data_migrations.py::test_run_in_batches_refuses_an_atomic_migration_and_changes_nothing",
        ),
    ),
    Mutation(
        "data-migration-small-table-unbounded",
        "RunOnSmallTable runs on a table above its stated size",
        "skincare/data_migrations.py",
        "RunOnSmallTable._run",
        "if rows > self.max_rows:",
        "if False:",
        (
            "skincare/tests/test_data_migrations.py::test_run_on_small_table_refuses_a_table_above_its_stated_size_before_running",
        ),
    ),
    Mutation(
        "migration-bounds-open-connection-only",
        "migrate bounds only a connection already open (one it opens waits as a request)",
        "skincare/management/commands/migrate.py",
        "migration_timeouts",
        "connection_created.connect(on_connect, weak=False)",
        "pass",
        (
            "skincare/tests/test_migrate_command.py::test_a_connection_opened_during_the_migration_gets_its_bounds",
            "skincare/tests/test_migrate_command.py::test_the_migrate_command_bounds_the_connection_it_opens_itself",
        ),
    ),
    Mutation(
        "migration-no-statement-timeout",
        "migrate runs its statements without MIGRATION_STATEMENT_TIMEOUT_MS",
        "skincare/management/commands/migrate.py",
        "_apply_timeouts",
        'f"{settings.MIGRATION_STATEMENT_TIMEOUT_MS}ms"',
        '"0ms"',
        (
            "skincare/tests/test_migrate_command.py::test_a_statement_longer_than_the_migration_statement_timeout_is_cancelled",
        ),
    ),
    Mutation(
        "dot-env-export-unseen",
        "an export DJANGO_ENV= line of .env is not read as one",
        "config/modes.py",
        "_LINE",
        'r"^\\s*(?:export\\s+)?DJANGO_ENV\\s*=\\s*(.*?)\\s*$"',
        'r"^\\s*DJANGO_ENV\\s*=\\s*(.*?)\\s*$"',
        (
            "skincare/tests/test_production_switch.py::test_an_exported_django_env_line_in_dot_env_is_read_like_a_bare_one",
        ),
    ),
    Mutation(
        "dot-env-odd-line-skipped",
        "a .env line naming DJANGO_ENV in another shape is skipped",
        "config/modes.py",
        "dot_env_value",
        "if match is None and _NAMED.match(line):",
        "if False:",
        (
            "skincare/tests/test_production_switch.py::test_a_dot_env_line_naming_django_env_in_another_shape_refuses_rather_than_being_skipped",
        ),
    ),
    Mutation(
        "shop-currency-any-case",
        "a lower-case SHOP_CURRENCY passes the start-up check",
        "skincare/checks.py",
        "CURRENCY_CODE",
        'r"[A-Z]{3}"',
        'r"[A-Za-z]{3}"',
        (
            "skincare/tests/test_configuration.py::test_a_shop_currency_that_is_not_three_capital_letters_refuses_to_start",
        ),
    ),
    Mutation(
        "pooled-statement-timeout-looser",
        "a pooled connection with a looser statement_timeout than the setting passes E014",
        "skincare/checks.py",
        "pooled_connection_timeouts",
        "if found == 0 or found > wanted",
        'if found == 0 or (found > wanted and name == "lock_timeout")',
        (
            "skincare/tests/test_db_timeouts.py::test_a_pooled_process_refuses_a_connection_without_bounds_or_with_looser_ones",
        ),
    ),
    Mutation(
        "rehearsal-client-drops-a-cut-body",
        "the rehearsal client counts a request only on an answer or an OSError: a body cut off mid-way kills the shopper",
        "devtools/rehearsal_client.py",
        "Recorder.send",
        "except Exception as error:",
        "except (OSError, urllib.error.URLError) as error:",
        (
            "skincare/tests/test_rehearsal_client.py::"
            "test_every_request_ends_counted_and_a_cut_body_a_500_and_a_time_out_are_failures",
        ),
    ),
    Mutation(
        "rehearsal-client-5xx-not-failed",
        "the rehearsal client does not count a 5xx answer as a failed request",
        "devtools/rehearsal_client.py",
        "tally",
        'c.outcome == "answer" and c.status >= 500',
        'c.outcome == "answer" and c.status >= 600',
        ("skincare/tests/test_rehearsal_client.py::test_a_5xx_answer_is_a_failed_request",),
    ),
    Mutation(
        "rehearsal-shopper-death-unnoticed",
        "a shopper thread that dies is not counted as lost: the run passes without the requests it would have sent",
        "devtools/rehearsal_client.py",
        "Recorder.shopper_thread",
        'self.lost.append(f"shopper {i} died: {error!r}")',
        "pass",
        ("skincare/tests/test_rehearsal_client.py::test_a_shopper_thread_that_dies_is_lost_and_fails_the_run",),
    ),
    Mutation(
        "rehearsal-no-minimum",
        "a rehearsal passes with fewer requests than it states",
        "devtools/rehearsal_client.py",
        "verdict",
        "if t.requests < min_requests:",
        "if False:",
        ("skincare/tests/test_rehearsal_client.py::test_fewer_requests_or_shoppers_than_stated_fail_the_run",),
    ),
    Mutation(
        "deploy-rehearsal-own-front",
        "the deploy rehearsal's front waits 10 s before shedding, not production's queue timeout",
        "devtools/deploy_rehearsal.py",
        "front",
        "HAProxy(servers, maxconn=workers * web_threads())",
        "HAProxy(servers, maxconn=workers * web_threads(), queue_timeout_ms=10000)",
        (
            "skincare/tests/test_rehearsal_client.py::"
            "test_the_deploy_rehearsal_runs_productions_front_with_every_worker_busy",
        ),
    ),
    Mutation(
        "deploy-rehearsal-release-unseen",
        "the deploy rehearsal passes when the answers after the release still come from the old one",
        "devtools/deploy_rehearsal.py",
        "release_problems",
        "if stale := [c for c in after if c.release != NEW_RELEASE]:",
        "if stale := [c for c in after if False]:",
        ("skincare/tests/test_rehearsal_client.py::test_the_deploy_rehearsal_sees_the_new_release_in_the_answers",),
    ),
    Mutation(
        "release-header-missing",
        "answers do not name the release that gave them (no X-Release)",
        "skincare/middleware.py",
        "ReleaseHeaderMiddleware.__call__",
        'response.headers["X-Release"] = settings.RELEASE_ID',
        "pass",
        ("skincare/tests/test_release_header.py::test_every_answer_names_the_release",),
    ),
    Mutation(
        "release-id-any-value",
        "RELEASE_ID takes any value, even one that writes another header",
        "config/settings.py",
        MODULE,
        'RELEASE_ID and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}", RELEASE_ID)',
        "False",
        ("skincare/tests/test_release_header.py::test_a_release_that_cannot_be_a_header_refuses_to_start",),
    ),
    Mutation(
        "make-migrate-through-the-pooler",
        "make migrate (and so make run) ignores MIGRATE_DATABASE_URL and migrates through PgBouncer",
        "Makefile",
        MODULE,
        'DATABASE_URL="$$MIGRATE_DATABASE_URL" DB_PGBOUNCER=false $(PY) manage.py migrate',
        "$(PY) manage.py migrate",
        ("skincare/tests/test_make_migrate.py::test_make_migrate_runs_on_migrate_database_url_not_through_the_pooler",),
    ),
    Mutation(
        "make-setup-without-hashes",
        "make setup (make run, make test, CI) installs the dev lock without --require-hashes",
        "Makefile",
        MODULE,
        "pip install --quiet --require-hashes -r requirements-dev.lock",
        "pip install --quiet -r requirements-dev.lock",
        ("skincare/tests/test_lock_files.py::test_make_and_the_image_install_only_a_lock_with_require_hashes",),
    ),
    Mutation(
        "image-without-hashes",
        "the production image installs the runtime lock without --require-hashes",
        "Dockerfile",
        MODULE,
        "pip install --no-cache-dir --require-hashes -r requirements.lock",
        "pip install --no-cache-dir -r requirements.lock",
        ("skincare/tests/test_lock_files.py::test_make_and_the_image_install_only_a_lock_with_require_hashes",),
    ),
    Mutation(
        "front-keeps-client-forwarded-for",
        "the front appends to the X-Forwarded-For a client sent instead of removing it",
        "deploy/haproxy/haproxy.cfg.template",
        MODULE,
        "http-request del-header X-Forwarded-For",
        "",
        (
            "skincare/tests/test_front_owns_the_client_address.py::test_the_application_sees_the_fronts_headers_never_the_clients",
            "skincare/tests/test_front_owns_the_client_address.py::test_a_client_inside_the_trusted_range_cannot_forge_its_address_through_the_front",
        ),
    ),
    Mutation(
        "front-no-forwardfor",
        "the front does not append the client's address (every client is the front's one address)",
        "deploy/haproxy/haproxy.cfg.template",
        MODULE,
        "option forwardfor",
        "",
        (
            "skincare/tests/test_front_owns_the_client_address.py::test_a_forged_x_forwarded_for_has_no_effect_on_the_login_throttle",
        ),
    ),
    Mutation(
        "front-keeps-client-proto",
        "the front passes on the X-Forwarded-Proto a client sent (plain HTTP claims to be HTTPS)",
        "deploy/haproxy/haproxy.cfg.template",
        MODULE,
        "http-request del-header X-Forwarded-Proto\n"
        "http-request set-header X-Forwarded-Proto https if { ssl_fc }\n"
        "http-request set-header X-Forwarded-Proto http if !{ ssl_fc }",
        "",
        (
            "skincare/tests/test_front_owns_the_client_address.py::test_the_application_sees_the_fronts_headers_never_the_clients",
        ),
    ),
    Mutation(
        "web-workers-sync",
        "web workers serve one request at a time: a payment page waiting on the gateway holds a whole worker",
        "config/gunicorn.conf.py",
        MODULE,
        'worker_class = "gthread"\ntry:\n    threads = web_threads()',
        'worker_class = "sync"\ntry:\n    threads = 1 or web_threads()',
        (
            "payments/tests/test_gateway_stall_live.py::"
            "test_a_stalled_gateway_leaves_the_catalogue_and_checkout_as_fast_as_before[bulkhead-breaker-never-opens]",
        ),
    ),
    Mutation(
        "bulkhead-as-wide-as-threads",
        "a bulkhead as wide as a worker's threads starts: a stalled gateway may hold every thread",
        "config/settings.py",
        MODULE,
        "if GATEWAY_MAX_CALLS >= WEB_THREADS:",
        "if False:",
        ("skincare/tests/test_configuration.py::test_the_bulkhead_stays_below_the_threads_it_protects",),
    ),
    Mutation(
        "queue-counters-read-unguarded",
        "the threads of a process read old queue counters at once and hold newly placed passes twice",
        "waitingroom/counters.py",
        "queue_counters",
        "with _reading:",
        "if True:",
        ("waitingroom/tests/test_counters_threads.py::test_the_threads_of_a_process_read_the_old_counters_once",),
    ),
    Mutation(
        "gateway-boundary-made-unguarded",
        "the threads of a process may each make a boundary: each counts its own calls, the bulkhead multiplied",
        "payments/boundary.py",
        "boundary",
        "with _making:",
        "if True:",
        ("payments/tests/test_gateway_boundary.py::test_the_threads_of_a_process_share_one_boundary",),
    ),
    Mutation(
        "gunicorn-control-socket",
        "gunicorn binds its default control socket: one path for every instance on a host, able to stop them",
        "config/gunicorn.conf.py",
        MODULE,
        "control_socket_disable = True",
        "control_socket_disable = False",
        ("skincare/tests/test_gunicorn_conf.py::test_an_instance_opens_no_control_socket[project]",),
    ),
    Mutation(
        "sweeper-lease-not-retried",
        "the sweepers' lease outside the transaction runner: a lock timeout ends a looping sweeper",
        "payments/sessions.py",
        "_due_sessions_lease",
        "@retry_transient",
        "",
        (
            "payments/tests/test_sweepers_share.py::"
            "test_a_looping_sweeper_that_waits_too_long_for_the_lease_sweeps_again[retried]",
        ),
    ),
    Mutation(
        "docgen-check-blind",
        "the generated docs' comparison always says equal: a hand-edited or stale table passes `make docs`' check",
        "devtools/docgen.py",
        "differs",
        "return with_block(text, block, name=name) != text",
        "return False",
        (
            "skincare/tests/test_generated_docs.py::test_control_an_edited_row_is_caught_and_make_docs_writes_it_back",
            "skincare/tests/test_generated_docs.py::test_control_a_row_removed_or_written_outside_the_markers_is_caught",
            "skincare/tests/test_generated_docs.py::test_control_a_new_error_class_makes_the_committed_readme_stale",
        ),
    ),
    Mutation(
        "error-without-when",
        "an exposed DomainError may leave out `when`: its row of the README's error table is empty",
        "skincare/errors.py",
        "DomainError.__init_subclass__",
        'if cls.expose and not cls.__dict__.get("when", "").strip():',
        "if False:",
        (
            "skincare/tests/test_generated_docs.py::test_control_a_domain_error_without_when_is_refused_at_class_definition",
        ),
    ),
    Mutation(
        "variables-unchecked",
        "docgen no longer compares the variables the product reads with config/variables.py",
        "devtools/docgen.py",
        "variable_problems",
        "problems = list(unknown)",
        "return []",
        ("skincare/tests/test_generated_docs.py::test_control_an_undeclared_or_unread_variable_is_caught",),
    ),
]


class TargetError(Exception):
    """A mutation whose target cannot be applied: missing, ambiguous, or a mutant that does not parse."""


def _defined_names(node: ast.stmt) -> list[str]:
    """The names a statement defines: a def's or class's name, or the plain names an assignment binds."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return [target.id for target in targets if isinstance(target, ast.Name)]


def _definitions(body: list[ast.stmt], name: str) -> list[ast.stmt]:
    """The statements of ``body`` that define ``name``: a def or class, or an assignment to it. Looks inside
    ``if``/``try``/``with`` blocks too (two definitions under an ``if`` make the name ambiguous)."""
    found: list[ast.stmt] = []
    for node in body:
        if name in _defined_names(node):
            found.append(node)
        elif isinstance(node, ast.If | ast.Try | ast.With):
            for block in ("body", "orelse", "finalbody"):
                found.extend(_definitions(getattr(node, block, []), name))
            for handler in getattr(node, "handlers", []):
                found.extend(_definitions(handler.body, name))
    return found


def _line_offsets(text: str) -> list[int]:
    offsets = [0]
    for line in text.splitlines(keepends=True):
        offsets.append(offsets[-1] + len(line))
    return offsets


def definition_span(text: str, where: str, *, path: str = "<source>") -> tuple[int, int]:
    """Character offsets of the source of the definition ``where`` (a dotted qualified name, or ``<module>``) in
    ``text``, decorators included. Raises :class:`TargetError` unless exactly one definition has that name."""
    if where == MODULE:
        return 0, len(text)
    if not path.endswith(".py") and path != "<source>":
        raise TargetError(f"{path} is not Python: its target is {MODULE}")
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as exc:
        raise TargetError(f"{path} does not parse: {exc}") from exc
    body: list[ast.stmt] = tree.body
    node: ast.stmt | None = None
    for part in where.split("."):
        found = _definitions(body, part)
        if len(found) != 1:
            what = "no definition" if not found else f"{len(found)} definitions"
            raise TargetError(f"{path}: {what} of {part!r} (looking for {where})")
        node = found[0]
        body = getattr(node, "body", [])
    assert node is not None and node.end_lineno is not None
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    offsets = _line_offsets(text)
    return offsets[first - 1], offsets[node.end_lineno]


def snippet_pattern(snippet: str) -> re.Pattern[str]:
    """``snippet`` with whitespace ignored: its other characters in order, any whitespace (or none) between."""
    characters = [re.escape(c) for c in snippet if not c.isspace()]
    if not characters:
        raise TargetError("an empty snippet matches everywhere")
    return re.compile(r"\s*".join(characters))


def locate(text: str, mutation: Mutation) -> tuple[int, int]:
    """Offsets of the one occurrence of the mutation's snippet inside its definition. :class:`TargetError` when the
    definition is missing or ambiguous, or the snippet occurs there zero or several times."""
    start, end = definition_span(text, mutation.where, path=mutation.path)
    hits = list(snippet_pattern(mutation.original).finditer(text, start, end))
    if len(hits) != 1:
        raise TargetError(
            f"{mutation.name}: expected {mutation.original!r} once in {mutation.path}:{mutation.where}, "
            f"found it {len(hits)} times"
        )
    return hits[0].start(), hits[0].end()


def mutated_source(text: str, mutation: Mutation) -> str:
    """The file's text with the mutation applied; :class:`TargetError` if it cannot be located or does not parse."""
    start, end = locate(text, mutation)
    mutated = text[:start] + mutation.replacement + text[end:]
    if not mutation.path.endswith(".py"):
        return mutated  # a Makefile, a Dockerfile, a configuration file: its whole text is the target (<module>)
    try:
        ast.parse(mutated, filename=mutation.path)
    except SyntaxError as exc:
        raise TargetError(f"{mutation.name}: the mutant of {mutation.path} does not parse: {exc}") from exc
    return mutated


def apply(root: Path, mutation: Mutation) -> None:
    path = root / mutation.path
    path.write_text(mutated_source(path.read_text(), mutation))


def module_name(path: str) -> str:
    """The module the start-up check imports: the mutated one, or the settings when the file is not Python."""
    if not path.endswith(".py"):
        return "config.settings"
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def database_url() -> str:
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    sys.path.insert(0, str(BASE_DIR))
    from devtools import devdb

    found = devdb.url()
    if not found:
        raise SystemExit("the embedded PostgreSQL is not running: run `make db` first (or set DATABASE_URL)")
    return found


def copy_tree(target: Path) -> None:
    shutil.copytree(BASE_DIR, target, ignore=IGNORE)


def python() -> str:
    venv = BASE_DIR / ".venv" / "bin" / "python"
    return str(venv if venv.exists() else sys.executable)


# Run in a mutant's tree: the test settings, Django's system checks, then an import of the mutated module.
STARTUP_CHECK = """
import importlib, sys
import devtools.testenv
import django
django.setup()
from django.core.management import call_command
call_command("check", verbosity=0)
importlib.import_module(sys.argv[1])
"""


def startup_error(root: Path, mutation: Mutation, env: dict[str, str]) -> str | None:
    """Why the mutant does not start (the tail of the error), or None when it does."""
    # A configuration file (gunicorn's conf.py is Python, but no module: a dot in its name): Django's start only.
    importable = mutation.path.endswith(".py") and "." not in Path(mutation.path).stem
    module = module_name(mutation.path) if importable else "django"
    result = subprocess.run(
        [python(), "-c", STARTUP_CHECK, module],
        cwd=root,
        env={**env, "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode == 0:
        return None
    return (result.stderr or result.stdout).strip()[-2000:]


@dataclasses.dataclass(frozen=True)
class TestRun:
    returncode: int
    failed: int  # tests that ran and failed an assertion (or raised in their body)
    errors: int  # set-up, teardown or collection errors
    output: str

    @property
    def verdict(self) -> str:
        """``passed``, ``failed`` (a test ran and failed; an error in its own teardown after that does not change
        it) or ``error`` (a collection or set-up error, an interrupted run, no report: the tests did not run)."""
        if self.returncode == 0 and not self.failed and not self.errors:
            return "passed"
        if self.returncode == 1 and self.failed:
            return "failed"
        return "error"


def junit_counts(report: Path) -> tuple[int, int]:
    """(failed, errors) from pytest's JUnit XML report; (0, 1) when there is no readable report."""
    try:
        tree = ET.parse(report)  # noqa: S314 - pytest wrote this file a moment ago
    except (OSError, ET.ParseError):
        return 0, 1
    failed = errors = 0
    for case in tree.iter("testcase"):
        failed += len(case.findall("failure"))
        errors += len(case.findall("error"))
    for suite in tree.iter("testsuite"):  # collection errors are counted on the suite, with no testcase
        errors = max(errors, int(suite.get("errors", 0)))
    return failed, errors


def run_tests(root: Path, tests: tuple[str, ...], env: dict[str, str]) -> TestRun:
    report = root / ".mutate-junit.xml"
    command = [python(), "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", f"--junitxml={report}"]
    result = subprocess.run([*command, *tests], cwd=root, env=env, capture_output=True, text=True, check=False)
    failed, errors = junit_counts(report)
    return TestRun(result.returncode, failed, errors, (result.stdout + result.stderr)[-3000:])


def check_all(mutations: list[Mutation]) -> list[str]:
    """Locate and apply every mutation in memory (nothing is written or run); returns one problem per line."""
    problems = []
    for mutation in mutations:
        try:
            mutated_source((BASE_DIR / mutation.path).read_text(), mutation)
        except (TargetError, OSError) as exc:
            problems.append(str(exc))
    return problems


def run_mutant(tmp: Path, mutation: Mutation, env: dict[str, str]) -> tuple[str, str]:
    """(status, detail) of one mutant: CAUGHT, MISSED or ERROR."""
    root = tmp / mutation.name
    copy_tree(root)
    try:
        try:
            apply(root, mutation)
        except TargetError as exc:
            return "ERROR", f"target: {exc}"
        problem = startup_error(root, mutation, env)
        if problem:
            return "ERROR", f"the mutant does not start:\n{problem}"
        run = run_tests(root, mutation.tests, env)
        if run.verdict == "failed":
            return "CAUGHT", ""
        if run.verdict == "passed":
            return "MISSED", ""
        return "ERROR", (
            f"the run errored (pytest exit {run.returncode}, {run.failed} failed, {run.errors} errors):\n{run.output}"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None, mutations: list[Mutation] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.mutate", description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="only these mutations")
    parser.add_argument("--list", action="store_true", help="list every mutation's target and its tests, run nothing")
    parser.add_argument("--check", action="store_true", help="locate and apply every mutation in memory, run nothing")
    args = parser.parse_args(argv)
    known = MUTATIONS if mutations is None else mutations
    unknown = set(args.names) - {m.name for m in known}
    if unknown:
        raise SystemExit(f"unknown mutations: {sorted(unknown)}")
    chosen = [m for m in known if not args.names or m.name in args.names]
    if args.list:
        for m in chosen:
            print(f"{m.name:34} {m.path}:{m.where}\n{'':34} {m.what}\n{'':34} tests: {', '.join(m.tests)}")
        return 0
    problems = check_all(chosen)
    if args.check:
        print("\n".join(problems) or f"all {len(chosen)} targets found exactly once, every mutant parses")
        return 1 if problems else 0
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DATABASE_TEST_NAME": f"test_skincare_mutate_{os.getpid()}",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    results: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="skincare-mutate-") as tmp:
        baseline = Path(tmp) / "baseline"
        copy_tree(baseline)
        all_tests = tuple(dict.fromkeys(t for m in chosen for t in m.tests))
        run = run_tests(baseline, all_tests, env)
        if run.verdict != "passed":
            print(run.output)
            raise SystemExit("the unmutated tree does not pass the mutation tests: fix that first")
        print(f"baseline: {len(all_tests)} tests green")
        for mutation in chosen:
            started = time.monotonic()
            status, detail = run_mutant(Path(tmp), mutation, env)
            results[mutation.name] = status
            label = {"CAUGHT": "RED   (caught)", "MISSED": "GREEN (MISSED)", "ERROR": "ERROR (not run)"}[status]
            print(f"{label} {mutation.name}: {mutation.what} [{time.monotonic() - started:.1f}s]")
            if detail:
                print("    " + detail.replace("\n", "\n    "))
    missed = [name for name, status in results.items() if status == "MISSED"]
    errored = [name for name, status in results.items() if status == "ERROR"]
    if missed:
        print(f"mutations the tests did not catch: {missed}")
    if errored:
        print(f"mutations that could not be applied or run (not counted as caught): {errored}")
    if missed or errored:
        return 1
    print(f"all {len(chosen)} mutations turned the tests red")
    return 0


if __name__ == "__main__":
    sys.exit(main())
