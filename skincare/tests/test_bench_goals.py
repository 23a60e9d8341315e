"""``bench.goals`` and the framework's floor it measures (``bench.floor``): the floor runs the seed's transaction as
pgbench runs it (the same statements, in the same order) and writes what a checkout writes, with the audit clean;
it is nowhere in the application; the goal table says met or by how much, and lands in its own subsection."""

import json
import re
import urllib.error
import urllib.request
from decimal import Decimal
from pathlib import Path

import pytest
from django.test import RequestFactory
from django.urls import resolve

from bench import floor, goals
from bench.drivers import pgbench_script
from devtools.testing import assert_invariants
from inventory.models import Inventory, StockMovement
from orders.models import Order, OrderLine, Reservation
from payments.models import PaymentAttempt
from skincare.tests.test_metrics import _url

ROOT = Path(__file__).resolve().parents[2]


def _as_pgbench(sql: str) -> str:
    return re.sub(r"%\((\w+)\)s", r":\1", sql)


@pytest.mark.parametrize("limit", ["limit-hot-seed-order", "limit-spread"])
def test_the_floor_sends_the_seeds_statements_in_the_seeds_order(limit):
    script = pgbench_script(limit, customer_id=7)

    positions = [script.index(_as_pgbench(sql)) for sql in floor.statements()]

    assert len(positions) == 7  # price read, order, guarded UPDATE, line, reservation, payment attempt, ledger row
    assert positions == sorted(positions)
    assert all("%(" not in sql or re.search(r"%\((pid|cust|price|order_id)\)s", sql) for sql in floor.statements())


def _post(body: object) -> object:
    return floor.checkout(RequestFactory().post("/v1/checkout", json.dumps(body), content_type="application/json"))


@pytest.mark.django_db
def test_the_floor_view_answers_201_and_writes_the_rows_of_a_checkout(make_product, customer, settings):
    settings.FLOOR_CUSTOMER_ID = customer.pk
    product = make_product(stock=5, price="129000.00")

    response = _post({"items": [{"product_id": product.pk, "qty": 1}]})

    assert response.status_code == 201
    order = Order.objects.get(pk=json.loads(response.content)["order_id"])
    assert (order.customer_id, order.status, order.total) == (customer.pk, "pending_payment", Decimal("129000.00"))
    assert list(OrderLine.objects.filter(order=order).values_list("product_id", "qty", "unit_price")) == [
        (product.pk, 1, Decimal("129000.00"))
    ]
    assert list(Reservation.objects.filter(order=order).values_list("product_id", "bucket", "qty", "status")) == [
        (product.pk, 0, 1, "active")
    ]
    assert list(PaymentAttempt.objects.filter(order=order).values_list("status", "amount")) == [
        ("pending", Decimal("129000.00"))
    ]
    assert list(
        StockMovement.objects.filter(order_id=order.pk).values_list("reason", "available_delta", "reserved_delta")
    ) == [("reserve", -1, 1)]
    stock = Inventory.objects.get(product=product)
    assert (stock.available_stock, stock.reserved_stock) == (4, 1)
    assert_invariants()


@pytest.mark.django_db
def test_the_floor_refuses_a_sold_out_product_and_writes_nothing(make_product, customer, settings):
    settings.FLOOR_CUSTOMER_ID = customer.pk
    product = make_product(stock=0)
    orders = Order.objects.count()

    response = _post({"items": [{"product_id": product.pk, "qty": 1}]})

    assert response.status_code == 409
    assert Order.objects.count() == orders  # the order inserted before the guarded UPDATE was rolled back
    assert not StockMovement.objects.filter(product=product, reason="reserve").exists()
    assert_invariants()


@pytest.mark.django_db
def test_the_floor_answers_400_to_a_body_without_a_product():
    assert _post({"items": []}).status_code == 400


def _status(url: str, body: bytes | None = None) -> int:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.django_db(transaction=True)
def test_the_floors_gunicorn_serves_the_seeds_checkout_and_nothing_of_the_application(make_product, customer):
    product = make_product(stock=10)
    body = json.dumps({"items": [{"product_id": product.pk, "qty": 1}]}).encode()
    _service, server = goals._servers(_url(), customer.pk, workers=1)  # as bench.goals starts it

    with server:
        statuses = [_status(f"{server.base}/v1/checkout", body) for _ in range(7)]  # prepared from the 6th
        other = _status(f"{server.base}/v1/products/{product.pk}")

    assert statuses == [201] * 7
    assert other == 404
    assert Order.objects.filter(customer=customer).count() == 7
    stock = Inventory.objects.get(product=product)
    assert (stock.available_stock, stock.reserved_stock) == (3, 7)
    assert server.errors_in_log() == []
    assert_invariants()


def test_the_floor_is_not_in_the_application_nor_in_the_image():
    assert resolve("/v1/checkout").func.__module__ != floor.__name__
    assert "bench" not in (ROOT / "skincare/urls.py").read_text()
    assert "bench" in (ROOT / ".dockerignore").read_text().split()


# The goal table


def test_a_goal_at_least_says_met_or_how_much_more_is_needed():
    met = goals.goal_row("x", [50, 60, 40], [100, 100, 100], baseline_what="b", unit="/s", op="≥", goal=0.4)
    short = goals.goal_row("x", [30], [100], baseline_what="b", unit="/s", op="≥", goal=0.4)

    assert (met["ratio"], met["ratio_rounds"], met["met"], met["distance"]) == (0.5, [0.5, 0.6, 0.4], True, "met")
    assert (short["met"], short["distance"]) == (False, "short: needs +33 % (10/s more)")


def test_a_goal_at_most_says_by_how_much_it_is_over():
    over = goals.goal_row("pg", [1.5], [1.0], baseline_what="seed", unit="ms", op="≤", goal=1.0)
    cpu = goals.goal_row("cpu", [1.69], [0.2], baseline_what="h", unit="ms", op="≤", goal=1.3, absolute=True)
    under = goals.goal_row("cpu", [0.3], [0.2], baseline_what="h", unit="ms", op="≤", goal=0.35, absolute=True)

    assert (over["met"], over["distance"]) == (False, "over: needs -33 % (0.500 ms less)")
    assert (cpu["met"], cpu["distance"]) == (False, "over by 0.390 ms (+30 %)")
    assert under["met"] is True


def _report() -> dict:
    cells = []
    for r in (1, 2):
        for name, per_s, pg in (("seed-hot", 1000, 0.9), ("hot", 300, 1.2), ("floor-hot", 600, 0.8),
                                ("seed-spread", 3000, 0.5), ("spread", 320, 1.1), ("floor-spread", 640, 0.6),
                                ("soldout", 1500, None), ("healthz", 2000, None)):  # fmt: skip
            cells.append({"cell": name, "round": r, "per_s": per_s, "pg_cpu_ms_per_checkout": pg, "p99_ms": 20.0,
                          "status_5xx": 0, "errors": 0, "other_cpu_pct": 5.0})  # fmt: skip
    bucket_cells = [
        {"subject": s, "clients": c, "round": 1, "ok_per_s": v, "pg_cpu_ms_per_checkout": 1.0, "p99_ms": 50.0,
         "committed": 8000, "waited": 4000, "failed": 0, "fallback_needed": 0, "other_cpu_pct": 3.0}
        for s, c, v in (("hot-1", 64, 1000), ("spread", 64, 2900), ("spread", 256, 1800), ("hot-16", 64, 1400),
                        ("hot-16", 256, 540))
    ]  # fmt: skip
    cpu = {n: {"median_ms": v} for n, v in (("healthz", 0.2), ("checkout", 1.6), ("checkout_sold_out", 0.34),
                                              ("product_get", 0.5))}  # fmt: skip
    report = {"command": "python -m bench.goals", "started": "2026-12-01 15:00", "finished": "15:08",
              "wall_seconds": 480, "load_before": "1.0, 1.0, 1.0", "load_after": "2.0, 2.0, 2.0",
              "args": {"connections": 16, "duration": 8, "rounds": 2, "bucket_rounds": 1},
              "servers": {"service": "3 sync workers"}, "cells": cells, "bucket_cells": bucket_cells,
              "audits": [True, True, True], "cpu": cpu}  # fmt: skip
    report["goals"] = goals.goals(report)
    return report


def test_the_table_has_every_goal_of_the_issue_with_its_verdict():
    report = _report()
    by = {(g["what"], g["baseline_what"]): g for g in report["goals"]}

    assert by[("HTTP checkouts/s, hot", "the seed's transaction, pgbench -M prepared, hot")]["ratio"] == 0.3
    assert by[("HTTP sold-out 409s/s", "HTTP /healthz requests/s")]["met"] is True  # 0.75 >= 0.7
    assert by[("HTTP checkouts/s, spread ÷ the framework floor", "the framework floor, spread")]["ratio"] == 0.5
    assert by[("pgbench, service's statements, K = 16 at 64 clients", "one row (K = 1) at 64 clients")]["met"] is False
    assert [g["met"] for g in report["goals"] if "in-process" in g["what"]] == [False, True, False]
    assert sum(g["met"] is not None for g in report["goals"]) == 11  # the goals; the floor's rows have none

    block = goals.markdown(report)

    assert "| HTTP checkouts/s, hot | 300/s |" in block
    assert "no: short: needs +33 % (100/s more)" in block
    assert "| pgbench, service's statements: K = 16, 64 clients (miss rate 50 %) | 1,400 [1,400] |" in block
    assert (
        "after each of the 2 rounds of HTTP and seed cells and after bench.buckets' cells: clean. Met: 2 of 11 goals."
        in block
    )
    assert goals.exit_code(report) == 0
    report["cells"][3]["status_5xx"] = 1
    assert goals.exit_code(report) == 1


def test_the_block_gets_its_subsection_before_the_not_done_list_once(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# B\n\n### Issue work\n\ntext\n\n### Not done in this round (issue 26)\n\n- item\n")

    goals.write_docs("first", doc)
    goals.write_docs("second", doc)

    text = doc.read_text()
    assert text.count(goals.HEADING) == 1
    assert f"{goals.MARK_START}\nsecond\n{goals.MARK_END}" in text and "first" not in text
    assert text.index(goals.HEADING) < text.index("### Not done in this round (issue 26)")
    assert text.index("### Issue work") < text.index(goals.HEADING)
