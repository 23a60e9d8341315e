"""The pgbench scripts: the seed's checkout transaction (a fixed reference, written here) and the service's own
statements (read from the service, so the script cannot drift from what it sends).

* **The seed's transaction** (``seed_script``): price read, order, the guarded UPDATE right after it (the row lock
  taken second and held for the rest), order line, reservation, payment attempt, ledger row.
* **The service's statements** (``service_script``): the quote read (``checkout.services.QUOTES_SQL``, which takes
  the customer's checkout lock), the one statement writing the order (``ORDER_SQL``), the generic-plans switch
  (``skincare.db.GENERIC_PLANS_SQL``) and the reserve statement (``inventory.reserve.RESERVE_SQL``) on bucket 0, in
  the order the checkout sends them. With K > 1 stock buckets the reservation is the bucket claims recorded from
  ``stock_reserve`` itself (``record_claims``: a request no single bucket covers, rolled back, so every claim
  misses and shows itself); a checkout whose claims all miss would need the full pass, which is not scripted: it
  rolls back and counts itself in the sequence ``bench_fallback`` (stock that never runs out: it stays 0).

``python -m bench.scripts`` (Django environment, the benchmark database) prints what the service sends as JSON:
``service_statements()``; the builders here are plain functions of that JSON.
"""

import json
import re
import sys
from typing import Any

from bench.seeding import HOT, SPREAD_COUNT, SPREAD_FIRST

TTL_SECONDS = 1800  # RESERVATION_TTL_SECONDS's default
FALLBACK_SEQUENCE = "bench_fallback"
# Parameters of the order statement whose values switch its branches off (no pending-order cap, no limited product):
# pgbench variables (``-D``), so that with ``-M prepared`` they are bound parameters, as the service sends them, and
# the planner cannot fold them away at parse time (what makes the generic plan worth asking for).
VARIABLES = {"max_pending": "0", "limited_ids": "{}"}


def variables(query_mode: str) -> list[str]:
    """``VARIABLES`` as pgbench's ``-D`` options: with ``-M simple`` pgbench pastes a value into the text, so a text
    value is quoted there; with ``-M prepared`` it is a parameter's value, sent as it is."""
    quote = query_mode == "simple"
    return [f"-D{k}=" + (f"'{v}'" if quote and not v.isdigit() else v) for k, v in VARIABLES.items()]


SEED_HEAD = """BEGIN;
SELECT price, now() AS db_now FROM products WHERE id = :pid AND is_active \\gset
INSERT INTO orders (customer_id, status, payment_expires_at, total, created_at, updated_at) VALUES (:cust, 'pending_payment', now() + interval '1800 seconds', :price, now(), now()) RETURNING id AS order_id \\gset"""
SEED_GUARDED_UPDATE = "UPDATE stock_buckets SET available_stock = available_stock - 1, reserved_stock = reserved_stock + 1, version = version + 1, updated_at = now() WHERE product_id = :pid AND available_stock >= 1;"
SEED_REST = [
    "INSERT INTO order_lines (order_id, product_id, qty, unit_price) VALUES (:order_id, :pid, 1, :price);",
    "INSERT INTO inventory_reservations (order_id, product_id, bucket, qty, status, expires_at, created_at, updated_at) VALUES (:order_id, :pid, 0, 1, 'active', now() + interval '1800 seconds', now(), now());",
    "INSERT INTO payment_attempts (order_id, status, amount, provider_reference, created_at, updated_at) VALUES (:order_id, 'pending', :price, '', now(), now());",
    "INSERT INTO stock_movements (product_id, available_delta, reserved_delta, reason, order_id, note, created_at) VALUES (:pid, -1, 1, 'reserve', :order_id, '', now());",
]


def _choose(spread: bool) -> str:
    return f"\\set pid random({SPREAD_FIRST}, {SPREAD_FIRST + SPREAD_COUNT - 1})" if spread else f"\\set pid {HOT}"


def seed_script(customer_id: int, *, spread: bool = False) -> str:
    """The seed's checkout transaction, on the hot product or spread over the spread products."""
    body = [SEED_HEAD, SEED_GUARDED_UPDATE, *SEED_REST, "COMMIT;"]
    return "\n".join([_choose(spread), f"\\set cust {customer_id}", *body]) + "\n"


def pgbench_sql(sql: str, **values: str) -> str:
    """One of the service's statements as pgbench runs it: each ``%(name)s`` replaced by the pgbench expression given
    for it (a parameter without one is an error: the script cannot drift from the service's text)."""
    return re.sub(r"%\((\w+)\)s", lambda m: values[m.group(1)], sql).strip()


def _quote_read(sent: dict[str, Any]) -> str:
    """QUOTES_SQL for ``:pid``, folded into one row for ``\\gset``; the customer's lock key drawn per transaction."""
    quotes = pgbench_sql(sent["QUOTES_SQL"], customer_lock=":lockkey", product_ids="ARRAY[:pid]::bigint[]")
    return f"SELECT min(q.available) AS avail, max(q.price) AS price FROM ({quotes}) AS q \\gset"


def _order_insert(sent: dict[str, Any]) -> str:
    constants = {name: f"'{value}'" for name, value in sent["ORDER_SQL_CONSTANTS"].items()}
    return (
        pgbench_sql(
            sent["ORDER_SQL"],
            **constants,
            customer_id=":cust",
            ttl_seconds=str(TTL_SECONDS),
            total=":price",
            product_ids="ARRAY[:pid]",
            qtys="ARRAY[1]",
            prices="ARRAY[:price]",
            limited_ids=":limited_ids",
            max_pending=":max_pending",
        )
        + " \\gset o_"
    )


def _claim(claim: list[Any], buckets: int) -> str:
    """One recorded claim for one unit of ``:pid`` in ``buckets`` buckets; ``\\aset`` sets ``:bucket`` only when it
    returns a row. Text parameters (the ledger reason) keep the value the service sent."""
    sql, params = claim
    values = {"product_id": ":pid", "qty": "1", "order_id": ":o_id", "bucket": "0", "bucket_count": str(buckets)}
    for name, value in params.items():
        if name not in values:
            if not isinstance(value, str):
                raise ValueError(f"the service's claim takes a parameter the bench does not know: {name}={value!r}")
            values[name] = "'" + value.replace("'", "''") + "'"
    return f"{pgbench_sql(sql, **values)} \\aset"


def _claims(sent: dict[str, Any], buckets: int) -> list[str]:
    """The recorded claims, each after the one before missed (rolled back to its savepoint)."""
    lines = ["SAVEPOINT claim1;", _claim(sent["claims"][0], buckets)]
    for n, claim in enumerate(sent["claims"][1:], start=2):
        again = [] if sent["one_savepoint"] else [f"SAVEPOINT claim{n};"]
        rollback = "claim1" if sent["one_savepoint"] else f"claim{n - 1}"
        lines += ["\\if :bucket < 0", f"ROLLBACK TO SAVEPOINT {rollback};", *again, _claim(claim, buckets), "\\endif"]
    return lines


def service_script(
    sent: dict[str, Any], customer_id: int, *, spread: bool = False, buckets: int = 1, generic_plans: bool = True
) -> str:
    """One checkout of one unit as the service sends it (``sent``: ``service_statements()``): hot or spread, the hot
    product in ``buckets`` buckets, with or without the generic-plans switch."""
    if buckets > 1 and spread:
        raise ValueError("the spread products have one stock row each")
    reserve = (
        _claims(sent, buckets)
        if buckets > 1
        else [pgbench_sql(sent["RESERVE_SQL"], qty="1", product_id=":pid", bucket="0", order_id=":o_id") + " \\aset"]
    )
    body = [
        "\\set bucket -1",
        "BEGIN;",
        *([sent["GENERIC_PLANS_SQL"] + ";"] if generic_plans else []),
        _quote_read(sent),
        "\\if :avail >= 1",
        _order_insert(sent),
        *reserve,
        "\\if :bucket >= 0",
        "COMMIT;",
        "\\else",
        "ROLLBACK;",
        f"SELECT nextval('{FALLBACK_SEQUENCE}');",
        "\\endif",
        "\\else",
        "ROLLBACK;",
        "\\endif",
    ]
    lockkey = f"\\set lockkey {sent['CUSTOMER_KEY_BASE']} + random(1, 1000000000)"
    return "\n".join([_choose(spread), f"\\set cust {customer_id}", lockkey, *body]) + "\n"


# --- what the service sends (a Django process on the benchmark database) ------------------------------------------


class _Rollback(Exception):
    pass


def record_reserve() -> list[tuple[str, dict[str, Any] | None]]:
    """Every statement of one ``stock_reserve`` of 2 units of a product in 2 buckets of one unit each (no single
    bucket covers it: every claim misses, then the full pass); rolled back, nothing is left behind."""
    from decimal import Decimal

    from django.db import connection, transaction

    from inventory import catalogue, reserve, services

    sent: list[tuple[str, dict[str, Any] | None]] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        sent.append((sql, dict(params) if isinstance(params, dict) else None))
        return execute(sql, params, many, context)

    try:
        with transaction.atomic():
            product = catalogue.product_create(sku="bench-claims", name="bench", price=Decimal(1), initial_stock=2)
            services.stock_buckets_set(product_id=product.pk, buckets=2)
            line = reserve.ReserveLine(product.pk, 2, bucket_count=2, stock_rows=2)
            with connection.execute_wrapper(record):  # the order does not exist: its foreign key is never checked
                reserve.stock_reserve(order_id=0, lines=[line])
            raise _Rollback
    except _Rollback:
        pass
    return sent


def claims_of(sent: list[tuple[str, dict[str, Any] | None]]) -> tuple[list[tuple[str, dict[str, Any]]], bool]:
    """The claim attempts of a recorded reservation (each statement after a ``SAVEPOINT`` that is followed by its
    ``ROLLBACK TO``), in order, and whether they share one savepoint. Raises ``ValueError`` when the service no
    longer claims that way (the script must then be looked at again)."""
    found: list[tuple[str, dict[str, Any]]] = []
    savepoints, name, i = 0, None, 0
    while i + 1 < len(sent):
        if sent[i][0].startswith("SAVEPOINT "):
            name, savepoints, i = sent[i][0].removeprefix("SAVEPOINT ").strip(), savepoints + 1, i + 1
        elif not found:
            break
        if name is None or i + 1 >= len(sent):
            break
        sql, params = sent[i]
        if sent[i + 1][0].strip() != f"ROLLBACK TO SAVEPOINT {name}" or params is None:
            break
        found.append((sql, params))
        i += 2
    if not found or i >= len(sent):
        raise ValueError("stock_reserve no longer sends claims after savepoints: look at bench/scripts.py again")
    return found, savepoints == 1 and len(found) > 1


def service_statements() -> dict[str, Any]:
    """The service's statement texts and constants the scripts need, and its recorded bucket claims."""
    from checkout.services import ORDER_SQL, ORDER_SQL_CONSTANTS, QUOTES_SQL
    from inventory.reserve import RESERVE_SQL
    from skincare.db import GENERIC_PLANS_SQL
    from skincare.locks import advisory_key

    claims, one_savepoint = claims_of(record_reserve())
    return {
        "QUOTES_SQL": QUOTES_SQL,
        "ORDER_SQL": ORDER_SQL,
        "ORDER_SQL_CONSTANTS": ORDER_SQL_CONSTANTS,
        "RESERVE_SQL": RESERVE_SQL,
        "GENERIC_PLANS_SQL": GENERIC_PLANS_SQL,
        "CUSTOMER_KEY_BASE": advisory_key("customer_checkout", 1) - 1,  # + a customer id
        "claims": claims,
        "one_savepoint": one_savepoint,
    }


if __name__ == "__main__":
    from devtools.processes import setup_django_quietly

    setup_django_quietly()
    print(json.dumps(service_statements()))
    sys.exit(0)
