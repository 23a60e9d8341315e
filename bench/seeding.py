"""The benchmark's data: the product ids and stock the cells use, ``seed()``, which re-creates the benchmark
database with them (demo data, the hot SKU, 1000 spread products, a sold-out SKU, 200 customer tokens, a queued SKU
with a waiting pass for each of those customers, and the tokens of 30,000 customers with no pass, who join it)."""

import json
from pathlib import Path

from devtools.processes import RESULTS, ctl, flash_sale_setup, log, manage, recreate_database

HOT = 101
SOLD_OUT = 900
QUEUED = 950
SPREAD_FIRST, SPREAD_COUNT = 2001, 1000
STOCK_BIG = 10_000_000
CUSTOMERS, CUSTOMER_PREFIX = 200, "bench-customer"
# The queue polls' requests, one waiting pass a line: "<customer token> <pass id> <signed pass>" (bench/checkout.lua).
QUEUE_PASSES = RESULTS / "bench-queue-passes.txt"
# The queue join's customers, one token a line, each used once per round (bench/checkout.lua): more than a round's
# 5 s of joins, so every join is a customer's first in the round's fresh gunicorn workers (a new pass, 201).
JOINERS, JOINER_PREFIX = 30_000, "bench-joiner"
JOIN_TOKENS = RESULTS / "bench-join-tokens.txt"

_CUSTOMER_PK = (
    "from django.contrib.auth import get_user_model; "
    f"print(get_user_model().objects.get(username='{CUSTOMER_PREFIX}-00000').pk)"
)


def seed(url: str) -> tuple[Path, int]:
    """Fresh database at ``url`` with the benchmark data; returns the tokens file (one per line, for wrk) and the
    id of the first bench customer (for pgbench's orders)."""
    log(
        f"fresh database {url.split('?')[0]}: migrate, demo data, {SPREAD_COUNT} spread products, sold-out SKU,"
        f" {CUSTOMERS} customers with a waiting pass of a queued SKU, {JOINERS} customers to join it"
    )
    RESULTS.mkdir(exist_ok=True)
    recreate_database(url)
    ctl(url, "seed-spread", str(SPREAD_FIRST), str(SPREAD_COUNT), str(STOCK_BIG))
    ctl(url, "seed-product", str(SOLD_OUT), "0", "--name", "Sold-out serum (bench)")
    flash_sale_setup(url, STOCK_BIG)  # the hot SKU gets stock that cannot run out during the run
    tokens_json = RESULTS / "bench-tokens.json"
    ctl(url, "tokens", str(CUSTOMERS), CUSTOMER_PREFIX, str(tokens_json))
    tokens_txt = RESULTS / "bench-tokens.txt"
    tokens_txt.write_text("\n".join(json.loads(tokens_json.read_text())) + "\n")
    ctl(url, "queue-passes", str(QUEUED), str(STOCK_BIG), CUSTOMER_PREFIX, str(tokens_json), str(QUEUE_PASSES))
    joiners_json = RESULTS / "bench-join-tokens.json"
    ctl(url, "tokens", str(JOINERS), JOINER_PREFIX, str(joiners_json))
    JOIN_TOKENS.write_text("\n".join(json.loads(joiners_json.read_text())) + "\n")
    customer_id = manage(url, "shell", "-c", _CUSTOMER_PK, quiet=True).stdout.split()[-1]
    return tokens_txt, int(customer_id)


_SET_HOT = """
from inventory import services
services.stock_buckets_set(product_id={pid}, buckets={k})
"""


def set_hot_buckets(url: str, buckets: int) -> None:
    """The hot product's stock spread over ``buckets`` stock buckets, through the service (rebalance ledger rows)."""
    manage(url, "shell", "-c", _SET_HOT.format(pid=HOT, k=buckets), quiet=True)
