"""``make mutate``: remove each protection in turn, in a scratch copy of the tree, and check that the tests see it.

For every mutation below: copy the tree (without .venv, .data, .git) to a temporary directory, apply the textual
change (the original text must be found exactly once, so a refactor cannot silently disable a mutation), run the
tests that guard that protection with this checkout's venv against the running embedded PostgreSQL (or
``DATABASE_URL``) under a test database of its own, and expect them to FAIL. The unmutated copy must pass the
same tests first. Exit code 0 only when every mutation turned the suite red. See docs/reliability.md.

    python -m devtools.mutate            # all mutations
    python -m devtools.mutate skip-locked retry-set-empty   # some of them
"""

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
IGNORE = shutil.ignore_patterns(
    ".venv",
    ".data",
    ".git",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
    "staticfiles",
    "bench-results",
)


@dataclasses.dataclass(frozen=True)
class Mutation:
    name: str
    what: str
    path: str
    original: str
    replacement: str
    tests: tuple[str, ...]


MUTATIONS = [
    Mutation(
        "skip-locked",
        "the sweeper's claim waits for held orders (SKIP LOCKED dropped)",
        "orders/locks.py",
        "FOR NO KEY UPDATE SKIP LOCKED",
        "FOR NO KEY UPDATE",
        ("orders/tests/test_sweeper_faults.py::test_sweeper_skips_an_order_someone_holds_without_waiting",),
    ),
    Mutation(
        "retry-set-empty",
        "deadlocks and serialization failures are not retried (RETRYABLE_SQLSTATES emptied)",
        "skincare/db.py",
        'RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})',
        "RETRYABLE_SQLSTATES = frozenset()",
        (
            "payments/tests/test_faults.py::test_a_deadlocked_checkout_is_retried_and_succeeds",
            "payments/tests/test_faults.py::test_a_serialization_failure_is_retried_from_the_start",
        ),
    ),
    Mutation(
        "no-retry-checkout",
        "retry_transient removed from checkout",
        "payments/checkout.py",
        "@retry_transient\n@transaction.atomic\ndef checkout(",
        "@transaction.atomic\ndef checkout(",
        (
            "payments/tests/test_faults.py::test_a_deadlocked_checkout_is_retried_and_succeeds",
            "payments/tests/test_faults.py::test_lock_timeout_on_checkout_is_503_busy_and_writes_nothing",
        ),
    ),
    Mutation(
        "no-retry-cancel",
        "retry_transient removed from cancel",
        "orders/services.py",
        "@retry_transient\n@transaction.atomic\ndef order_cancel(",
        "@transaction.atomic\ndef order_cancel(",
        ("payments/tests/test_faults.py::test_lock_timeout_on_cancel_is_503_busy_and_writes_nothing",),
    ),
    Mutation(
        "no-retry-sweeper",
        "retry_transient removed from the sweeper",
        "orders/services.py",
        "@retry_transient\n@transaction.atomic\ndef orders_expire_due(",
        "@transaction.atomic\ndef orders_expire_due(",
        (
            "orders/tests/test_sweeper_faults.py::test_sweeper_lock_timeout_is_busy_and_writes_nothing",
            "orders/tests/test_sweeper_faults.py::test_sweeper_command_reports_busy_with_exit_code_1",
        ),
    ),
    Mutation(
        "count-ignores-version",
        "Set counted stock saves a figure typed against a stale form (the version check dropped)",
        "inventory/services.py",
        "    if inventory.version != expected_version:\n",
        "    if False:\n",
        (
            "inventory/tests/test_stale_form.py::test_count_typed_against_stale_figures_is_refused_and_the_reservation_survives",
        ),
    ),
    Mutation(
        "pay-after-deadline",
        "the webhook pays without checking the deadline by the database clock",
        "payments/services.py",
        "        and db_now() < order.payment_expires_at\n",
        "",
        ("payments/tests/test_webhook_races.py::test_payment_at_the_deadline_racing_the_sweeper",),
    ),
    Mutation(
        "outage-is-500",
        "connection failures are not recognised (outage answers 500)",
        "skincare/db.py",
        'return code is None or code.startswith("08") or code in UNAVAILABLE_SQLSTATES',
        "return False",
        ("payments/tests/test_faults.py::test_checkout_connection_killed_after_its_first_statements_is_a_clean_503",),
    ),
    Mutation(
        "no-body-limit",
        "the request body limit middleware lets everything through",
        "skincare/middleware.py",
        "if limit is not None and length > limit:",
        "if False:",
        ("skincare/tests/test_fuzz.py::test_a_body_over_the_limit_is_413_payload_too_large_and_changes_nothing",),
    ),
    Mutation(
        "deep-json-500",
        "RecursionError from deeply nested JSON is not caught",
        "skincare/api.py",
        "        except RecursionError:\n",
        "        except ZeroDivisionError:\n",
        ("skincare/tests/test_fuzz.py::test_any_checkout_body_from_a_customer_is_never_a_5xx",),
    ),
    Mutation(
        "nul-token",
        "tokens are looked up without refusing impossible keys (non-ASCII → decoding error)",
        "skincare/api.py",
        "if len(raw) > MAX_TOKEN_LENGTH or not all(0x21 <= byte <= 0x7E for byte in raw):",
        "if False:",
        ("skincare/tests/test_fuzz.py::test_any_header_value_on_authenticated_endpoints_is_never_a_5xx",),
    ),
    Mutation(
        "no-guarded-reserve",
        "the stock reservation's guard (available_stock >= qty) dropped",
        "inventory/services.py",
        " WHERE product_id = %(product_id)s AND bucket = 0\n   AND available_stock >= %(qty)s\n",
        " WHERE product_id = %(product_id)s AND bucket = 0\n",
        (
            "payments/tests/test_checkout_race.py::test_guarded_update_alone_decides_when_every_buyer_passed_the_early_stock_read",
        ),
    ),
    Mutation(
        "sold-out-memory-unbounded",
        "the sold-out memory keeps refusing past 250 ms (its cap removed)",
        "inventory/soldout.py",
        "return min(max(settings.SOLD_OUT_CACHE_MS, 0) / 1000, MAX_WINDOW_SECONDS)",
        "return max(settings.SOLD_OUT_CACHE_MS, 0) / 1000",
        ("inventory/tests/test_soldout_memory.py::test_the_window_is_never_longer_than_250_ms",),
    ),
    Mutation(
        "nowait-waits",
        "row_lock_nowait products wait for the row instead of answering lock_busy",
        "inventory/services.py",
        "StockBucket.objects.select_for_update(no_key=True, nowait=nowait)",
        "StockBucket.objects.select_for_update(no_key=True, nowait=False)",
        ("inventory/tests/test_strategies.py::test_nowait_answers_lock_busy_at_once_while_the_row_is_held",),
    ),
    Mutation(
        "serializable-not-escalated",
        "a serializable product's checkout runs at READ COMMITTED",
        "payments/checkout.py",
        "        raise IsolationRequired(SERIALIZABLE)",
        "        pass",
        ("inventory/tests/test_strategies.py::test_changing_the_strategy_in_the_admin_changes_how_checkouts_lock",),
    ),
    Mutation(
        "optimistic-no-version",
        "the optimistic update forgets to compare the version it read",
        "inventory/services.py",
        "    optimistic = line.strategy == InventoryStrategy.OPTIMISTIC and line.version is not None\n",
        "    optimistic = False\n",
        (
            "inventory/tests/test_strategies.py::test_optimistic_gives_up_after_its_bound_when_the_version_keeps_changing",
        ),
    ),
    Mutation(
        "refusals-unbounded",
        "refusals stored under fresh Idempotency-Keys are never trimmed",
        "payments/checkout.py",
        "     ORDER BY id DESC OFFSET %(keep)s)",
        "     ORDER BY id DESC OFFSET %(keep)s LIMIT 0)",
        ("payments/tests/test_idempotency.py::test_stored_refusals_are_bounded_per_customer",),
    ),
    Mutation(
        "no-customer-lock",
        "checkout no longer takes the customer's checkout lock (limits counted before the previous order committed)",
        "payments/checkout.py",
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
        "THEN rate_limit_counters.hits + 1 ELSE 1 END",
        "THEN rate_limit_counters.hits + 1 ELSE rate_limit_counters.hits + 1 END",
        ("skincare/tests/test_abuse.py::test_a_rate_limited_customer_can_check_out_again_once_the_window_has_passed",),
    ),
    Mutation(
        "sweeper-early",
        "the sweeper claims orders up to a minute before their payment window closes",
        "orders/locks.py",
        "AND payment_expires_at <= now()",
        "AND payment_expires_at <= now() + interval '1 minute'",
        ("orders/tests/test_sweeper.py::test_a_sweep_expires_what_is_due_and_nothing_due_later",),
    ),
    Mutation(
        "sandbox-any-state",
        "the sandbox sends a payment for an order that is no longer pending (e.g. cancelled)",
        "payments/sandbox.py",
        "    if order.status != Order.Status.PENDING_PAYMENT:\n",
        "    if False:\n",
        ("payments/tests/test_sandbox.py::test_a_cancelled_or_expired_order_is_not_paid_from_the_sandbox",),
    ),
    Mutation(
        "sandbox-no-in-flight-claim",
        "every press of the sandbox queues another delivery",
        "payments/sandbox.py",
        "        if event_id in _in_flight:\n            return False\n",
        "",
        ("payments/tests/test_sandbox.py::test_presses_at_once_queue_one_delivery_on_one_thread",),
    ),
    Mutation(
        "xff-from-anyone",
        "X-Forwarded-For is believed from any peer, not only a trusted proxy",
        "skincare/clientaddr.py",
        "if peer is None or not networks or not _is_trusted(peer, networks):",
        "if peer is None or not networks:",
        ("skincare/tests/test_client_address.py::test_a_forged_x_forwarded_for_from_an_untrusted_peer_is_ignored",),
    ),
    Mutation(
        "throttle-raw-username",
        'the admin throttle counts the raw POSTed username ("demo-ops " dodges it)',
        "skincare/login_throttle.py",
        'username = login_username(request.POST.get("username", ""))',
        'username = request.POST.get("username", "")[:150]',
        ("skincare/tests/test_client_address.py::test_a_username_with_spaces_counts_for_the_account",),
    ),
    Mutation(
        "ipv6-per-address",
        "the admin throttle counts IPv6 clients per address instead of per /64",
        "skincare/clientaddr.py",
        "return str(ipaddress.IPv6Network((address, 64), strict=False).network_address)",
        "return str(address)",
        ("skincare/tests/test_client_address.py::test_two_ipv6_addresses_in_one_64_share_a_counter",),
    ),
    Mutation(
        "schema-per-request",
        "GET /v1/schema regenerates the document on every request",
        "skincare/openapi.py",
        "            if SchemaView._schema is None:",
        "            if True:",
        ("skincare/tests/test_openapi.py::test_the_schema_is_generated_once_per_process",),
    ),
    Mutation(
        "sale-window-unchecked",
        "checkout ignores the sale window (the quote's state is never looked at)",
        "payments/checkout.py",
        "    _refuse_outside_sale_window(quotes)\n",
        "\n",
        (
            "payments/tests/test_sale_window.py::test_before_the_window_409_sale_not_started_with_retry_after_and_nothing_written",
        ),
    ),
    Mutation(
        "sale-price-ignored",
        "checkout charges the regular price inside an open sale window",
        "inventory/selectors.py",
        "THEN p.sale_price ELSE p.price END",
        "THEN p.price ELSE p.price END",
        (
            "payments/tests/test_sale_window.py::test_inside_the_window_the_sale_price_is_the_unit_price_and_the_amount_the_webhook_must_match",
        ),
    ),
    Mutation(
        "sale-not-started-stored",
        "a 409 sale_not_started loses its Retry-After and is stored under the Idempotency-Key",
        "inventory/exceptions.py",
        "self.retry_after = max(retry_after_seconds, 1)",
        "self.retry_after = None",
        (
            "payments/tests/test_sale_window.py::test_a_409_sale_not_started_is_not_stored_so_the_same_key_buys_once_the_sale_opens",
        ),
    ),
    Mutation(
        "retryable-refusal-stored",
        "a retryable refusal (409 lock_busy, with Retry-After) is stored under its Idempotency-Key",
        "payments/checkout.py",
        "    return 400 <= exc.http_status < 500 and exc.retry_after is None\n",
        "    return 400 <= exc.http_status < 500\n",
        (
            "payments/tests/test_idempotency.py::test_a_lock_busy_answer_is_not_stored_and_the_retry_with_the_same_key_succeeds",
        ),
    ),
    Mutation(
        "bucket-claim-waits",
        "a bucketed product's claim waits for a held bucket (SKIP LOCKED dropped)",
        "inventory/services.py",
        "       FOR NO KEY UPDATE SKIP LOCKED\n), taken AS (",
        "       FOR NO KEY UPDATE\n), taken AS (",
        ("inventory/tests/test_buckets.py::test_a_checkout_never_waits_while_a_free_bucket_has_the_units",),
    ),
    Mutation(
        "bucket-refused-without-fallback",
        "a bucketed product is refused when no single bucket can cover the request (no full pass)",
        "inventory/services.py",
        "    _reserve_from_all(line, order_id=order_id, ledger_written=False)\n",
        "    raise StockConflict(product_ids=[line.product_id])\n",
        ("inventory/tests/test_buckets.py::test_a_request_larger_than_any_bucket_moves_units_and_sells",),
    ),
    Mutation(
        "bucket-released-to-bucket-0",
        "units of an ending reservation go back to bucket 0, not to the bucket that holds them",
        "inventory/services.py",
        "(product_id, held_in.get((order_id, product_id), 0), order_id, qty) for order_id",
        "(product_id, 0, order_id, qty) for order_id",
        (
            "orders/tests/test_sweeper.py::test_three_sweepers_over_thousands_of_due_orders_with_checkouts_running[bucketed]",
        ),
    ),
    Mutation(
        "upward-import",
        "inventory imports orders (the dependency guard must notice)",
        "inventory/selectors.py",
        "from django.db import connection\n",
        "from django.db import connection\n\nfrom orders.models import Order  # noqa: F401\n",
        ("skincare/tests/test_dependencies.py::test_no_layer_imports_a_higher_one",),
    ),
    Mutation(
        "cart-claim-unconditional",
        "the cart checkout's claim no longer requires an open cart (status check dropped)",
        "carts/services.py",
        "UPDATE carts SET status = %(checked_out)s, updated_at = now()\n"
        "WHERE id = %(id)s AND customer_id = %(customer_id)s AND status = %(open)s AND expires_at > now()",
        "UPDATE carts SET status = %(checked_out)s, updated_at = now()\n"
        "WHERE id = %(id)s AND customer_id = %(customer_id)s AND expires_at > now()",
        ("carts/tests/test_cart_races.py::test_fifty_concurrent_checkouts_of_one_cart_make_exactly_one_order",),
    ),
    Mutation(
        "cart-expiry-ignored",
        "the cart checkout's claim ignores the cart's expiry",
        "carts/services.py",
        "WHERE id = %(id)s AND customer_id = %(customer_id)s AND status = %(open)s AND expires_at > now()\n"
        "RETURNING id",
        "WHERE id = %(id)s AND customer_id = %(customer_id)s AND status = %(open)s\nRETURNING id",
        ("carts/tests/test_carts_api.py::test_an_expired_cart_is_410_on_get_put_and_checkout_nothing_written",),
    ),
]


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


def apply(root: Path, mutation: Mutation) -> None:
    path = root / mutation.path
    text = path.read_text()
    found = text.count(mutation.original)
    if found != 1:
        raise SystemExit(f"{mutation.name}: expected the original text once in {mutation.path}, found {found}")
    path.write_text(text.replace(mutation.original, mutation.replacement))


def run_tests(root: Path, tests: tuple[str, ...], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    python = BASE_DIR / ".venv" / "bin" / "python"
    command = [str(python if python.exists() else sys.executable), "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"]
    return subprocess.run([*command, *tests], cwd=root, env=env, capture_output=True, text=True, check=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.mutate")
    parser.add_argument("names", nargs="*", help="only these mutations")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTATIONS if not args.names or m.name in args.names]
    unknown = set(args.names) - {m.name for m in MUTATIONS}
    if unknown:
        raise SystemExit(f"unknown mutations: {sorted(unknown)}")
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DATABASE_TEST_NAME": f"test_skincare_mutate_{os.getpid()}",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    failures = []
    with tempfile.TemporaryDirectory(prefix="skincare-mutate-") as tmp:
        baseline = Path(tmp) / "baseline"
        copy_tree(baseline)
        all_tests = tuple(dict.fromkeys(t for m in chosen for t in m.tests))
        result = run_tests(baseline, all_tests, env)
        if result.returncode != 0:
            print(result.stdout[-3000:], result.stderr[-3000:])
            raise SystemExit("the unmutated tree does not pass the mutation tests: fix that first")
        print(f"baseline: {len(all_tests)} tests green")
        for mutation in chosen:
            root = Path(tmp) / mutation.name
            copy_tree(root)
            apply(root, mutation)
            started = time.monotonic()
            result = run_tests(root, mutation.tests, env)
            seconds = time.monotonic() - started
            red = result.returncode != 0
            print(f"{'RED  (caught)' if red else 'GREEN (MISSED)'} {mutation.name}: {mutation.what} [{seconds:.1f}s]")
            if not red:
                failures.append(mutation.name)
            shutil.rmtree(root, ignore_errors=True)
    if failures:
        print(f"mutations the tests did not catch: {failures}")
        return 1
    print(f"all {len(chosen)} mutations turned the tests red")
    return 0


if __name__ == "__main__":
    sys.exit(main())
