"""The bench's runners and scripts, without running a benchmark: wrk's and pgbench's outputs are read right, the
pgbench scripts carry the service's own statements (and the bucket claims recorded from ``stock_reserve``) with
every parameter bound, and the framework floor runs the seed's transaction in the seed's order, writing what a
checkout writes."""

import json
import re
from decimal import Decimal

import pytest
from django.test import RequestFactory
from django.urls import resolve

from bench import cells, floor, scripts
from bench.pgbench import latency_percentiles, parse_pgbench
from bench.wrk import parse_wrk
from devtools.testing import assert_invariants
from inventory.models import Inventory, Product, StockMovement
from orders.models import Order


def _wrk_out(**counts: int) -> str:
    raw = {"requests": 100, "duration_us": 2_000_000, "connect_errors": 0, "read_errors": 0, "write_errors": 0,
           "timeouts": 0, "status_errors": 0, "s201": 0, "s409": 0, "s2xx": 0, "s4xx": 0, "s5xx": 0, "sother": 0,
           "swaiting": 0, "p50_us": 1500, "p95_us": 4000, "p99_us": 9000, "max_us": 12000, "mean_us": 2000} | counts  # fmt: skip
    return "Running 2s test @ http://127.0.0.1:1\n  1 threads and 16 connections\nBENCH_JSON " + json.dumps(raw) + "\n"


def test_a_checkout_cell_counts_201s_and_calls_anything_but_201_and_409_an_error():
    cell = parse_wrk(_wrk_out(s201=80, s409=15, s5xx=5, timeouts=1), "hot")

    assert (cell["per_s"], cell["rps"], cell["p50_ms"], cell["p99_ms"]) == (40.0, 50.0, 1.5, 9.0)
    assert (cell["status_5xx"], cell["errors"]) == (5, 6)  # the 5 answers that were neither 201 nor 409, 1 timeout


def test_the_sold_out_cell_counts_409s_and_the_gets_count_2xx():
    assert parse_wrk(_wrk_out(s409=100), "soldout")["per_s"] == 50.0
    assert parse_wrk(_wrk_out(s409=90, s201=10), "soldout")["errors"] == 10  # a sale where none is possible
    for mode in ("product", "healthz"):
        cell = parse_wrk(_wrk_out(s2xx=96, s4xx=4), mode)
        assert (cell["per_s"], cell["errors"]) == (48.0, 4)


def test_the_queue_polls_count_200s_with_a_waiting_pass_and_call_anything_else_an_error():
    for mode in ("queue_poll", "queue_poll_unsigned"):
        cell = parse_wrk(_wrk_out(s2xx=95, swaiting=90, s4xx=5), mode)  # 5 refused, 5 answered but not waiting
        assert (cell["per_s"], cell["errors"]) == (45.0, 10)


def test_wrk_output_without_the_scripts_line_is_an_error():
    with pytest.raises(ValueError, match="no BENCH_JSON"):
        parse_wrk("unable to connect to 127.0.0.1:1 Connection refused", "hot")


PGBENCH_OUT = """pgbench (18.1)
transaction type: /tmp/x.sql
number of clients: 16
number of transactions actually processed: 5210
number of failed transactions: 3 (0.058%)
latency average = 15.3 ms
tps = 1041.887512 (without initial connection time)
"""


def test_pgbench_summary_and_log_are_read():
    assert parse_pgbench(PGBENCH_OUT) == {"per_s": 1041.9, "processed": 5210, "failed": 3}
    log = [f"0 {n} {latency} 0 1700000000 {n}" for n, latency in enumerate(range(1000, 101_000, 1000))]
    log.append("0 100 failed 0 1700000000 100")  # a failed transaction has no latency: left out

    assert latency_percentiles(log) == {"p50_ms": 51.0, "p99_ms": 100.0}
    assert latency_percentiles([]) == {"p50_ms": None, "p99_ms": None}
    with pytest.raises(ValueError, match="no tps line"):
        parse_pgbench("pgbench: error: connection to server failed")


def test_the_seed_script_is_the_seeds_transaction_in_the_seeds_order():
    script = scripts.seed_script(7, spread=True)

    statements = [scripts.SEED_HEAD.splitlines()[2], scripts.SEED_GUARDED_UPDATE, *scripts.SEED_REST]
    positions = [script.index(sql) for sql in statements]
    assert positions == sorted(positions)  # the row lock taken right after the order's INSERT, held for the rest
    assert script.startswith(f"\\set pid random({scripts.SPREAD_FIRST}, ") and "\\set cust 7\n" in script


def _as_pgbench(sql: str) -> str:
    return re.sub(r"%\((\w+)\)s", r":\1", sql)


def test_the_floor_sends_the_seeds_statements_in_the_seeds_order():
    script = scripts.seed_script(7)

    positions = [script.index(_as_pgbench(sql)) for sql in floor.statements()]

    assert len(positions) == 7  # price read, order, guarded UPDATE, line, reservation, payment attempt, ledger row
    assert positions == sorted(positions)


@pytest.mark.django_db
def test_the_service_script_carries_the_services_statements_with_every_parameter_bound():
    sent = scripts.service_statements()

    script = scripts.service_script(sent, 7)
    bucketed = scripts.service_script(sent, 7, buckets=8)

    assert "%(" not in script and "%(" not in bucketed
    for text in (
        sent["GENERIC_PLANS_SQL"],
        "pg_advisory_xact_lock(:lockkey)",
        "WITH new_order AS",
        "UPDATE stock_buckets",
    ):
        assert text in script
    assert sent["GENERIC_PLANS_SQL"] not in scripts.service_script(sent, 7, generic_plans=False)
    # the values that switch the order statement's branches off are bound parameters, as the service sends them
    assert ":max_pending > 0" in script and "cardinality(:limited_ids::bigint[])" in script
    assert (
        script.index("pg_advisory_xact_lock") < script.index("WITH new_order AS") < script.index("UPDATE stock_buckets")
    )
    claims = [scripts._claim(claim, 8) for claim in sent["claims"]]
    assert len(claims) >= 2  # the claim that never waits, then at least one waiting pass
    assert [bucketed.index(claim) for claim in claims] == sorted(bucketed.index(claim) for claim in claims)
    assert len(re.findall(r"^ROLLBACK TO SAVEPOINT claim", bucketed, flags=re.MULTILINE)) == len(claims) - 1


@pytest.mark.django_db
def test_pgbench_gets_the_variables_as_parameters_or_as_quoted_text():
    assert scripts.variables("prepared") == ["-Dmax_pending=0", "-Dlimited_ids={}"]
    assert scripts.variables("simple") == ["-Dmax_pending=0", "-Dlimited_ids='{}'"]


@pytest.mark.django_db
def test_the_claims_are_recorded_from_stock_reserve_and_nothing_is_left_behind():
    products = Product.objects.count()

    claims, _one_savepoint = scripts.claims_of(scripts.record_reserve())

    assert Product.objects.count() == products
    first, *waiting = claims
    assert "SKIP LOCKED" in first[0]
    assert waiting and all("SKIP LOCKED" not in sql for sql, _ in waiting)


def test_a_recording_without_claims_before_a_full_pass_is_refused():
    sent = [("SELECT bucket FROM stock_buckets FOR NO KEY UPDATE", {"product_id": 1})]

    with pytest.raises(ValueError, match="no longer sends claims"):
        scripts.claims_of(sent)


def test_a_claim_binds_the_scripts_variables_and_keeps_the_services_text_values():
    claim = ["x %(bucket_count)s %(product_id)s %(qty)s %(order_id)s %(reason)s",
             {"bucket_count": 2, "product_id": 7, "qty": 2, "order_id": 0, "reason": "re'serve"}]  # fmt: skip

    assert scripts._claim(claim, 8) == "x 8 :pid 1 :o_id 're''serve' \\aset"
    with pytest.raises(ValueError, match="does not know: shard=3"):
        scripts._claim(["SELECT %(shard)s", {"shard": 3}], 8)


def test_every_baseline_is_a_row_of_the_same_run_and_each_row_runs_on_one_thing():
    rows = [cell.row for cell in cells.CELLS]

    assert len(rows) == len(set(rows))
    assert all(cell.baseline in rows for cell in cells.CELLS if cell.baseline)
    assert all(cell.server in cells.VARIANTS for cell in cells.CELLS if cell.server)
    groups = cells.groups(cells.CELLS)
    assert [c for _key, members in groups for c in members] == cells.CELLS
    assert len({key for key, _ in groups}) == len(groups)  # each server started once per round


def test_only_runs_the_rows_naming_a_text_with_their_baselines():
    http = [cell for cell in cells.CELLS if cell.server]

    assert [cell.row for cell in cells.only(http, ["queue poll"])] == [cells.HEALTHZ, cells.POLL, cells.POLL_UNSIGNED]
    assert [cell.row for cell in cells.only(http, ["no signed pass", "product GET"])] == [
        cells.HEALTHZ, cells.PRODUCT, cells.POLL_UNSIGNED
    ]  # fmt: skip
    assert cells.only(http, ["pgbench"]) == []


def _post(body: object) -> object:
    return floor.checkout(RequestFactory().post("/v1/checkout", json.dumps(body), content_type="application/json"))


@pytest.mark.django_db
def test_the_floor_view_writes_the_rows_of_a_checkout_and_refuses_a_sold_out_product(make_product, customer, settings):
    settings.FLOOR_CUSTOMER_ID = customer.pk
    product, sold_out = make_product(stock=5, price="129000.00"), make_product(stock=0)
    orders = Order.objects.count()

    created = _post({"items": [{"product_id": product.pk, "qty": 1}]})
    refused = _post({"items": [{"product_id": sold_out.pk, "qty": 1}]})

    assert (created.status_code, refused.status_code, _post({"items": []}).status_code) == (201, 409, 400)
    order = Order.objects.get(pk=json.loads(created.content)["order_id"])
    assert (order.customer_id, order.total, Order.objects.count()) == (customer.pk, Decimal("129000.00"), orders + 1)
    assert list(StockMovement.objects.filter(order_id=order.pk).values_list("reason", "available_delta")) == [
        ("reserve", -1)
    ]
    stock = Inventory.objects.get(product=product)
    assert (stock.available_stock, stock.reserved_stock) == (4, 1)
    assert_invariants()


def test_the_floor_is_not_in_the_application():
    assert resolve("/v1/checkout").func.__module__ != floor.__name__
