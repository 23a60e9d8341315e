"""``bench.buckets`` scripts the claims that ``bench.service_trace`` records from the service's own
``stock_reserve``: the recording finds them, leaves nothing behind, and the pgbench script carries each one with
every parameter bound (no copy of the reserve path in the benchmark)."""

import re

import pytest

from bench import buckets, service_trace
from inventory.models import Product


@pytest.mark.django_db
def test_the_claims_are_recorded_from_stock_reserve_and_nothing_is_left_behind():
    products = Product.objects.count()

    claims = service_trace.reserve_claims()

    assert Product.objects.count() == products
    assert len(claims) >= 2  # the claim that never waits, then at least one waiting pass
    first, *waiting = claims
    assert "SKIP LOCKED" in first[0]
    assert all("SKIP LOCKED" not in sql for sql, _ in waiting)
    assert all(params["product_id"] and params["qty"] == service_trace.BUCKETS for _, params in claims)


@pytest.mark.django_db
def test_the_hot_script_runs_each_recorded_claim_with_its_parameters_bound():
    claims = service_trace.reserve_claims()

    script = buckets.hot_script(8, 1, claims)

    assert "%(" not in script
    assert len(re.findall(r"^SAVEPOINT claim", script, flags=re.MULTILINE)) == len(claims)
    assert len(re.findall(r"^ROLLBACK TO SAVEPOINT claim", script, flags=re.MULTILINE)) == len(claims) - 1
    for claim in claims:  # in the service's order
        assert buckets.claim_script(claim, 8) in script
    positions = [script.index(buckets.claim_script(claim, 8)) for claim in claims]
    assert positions == sorted(positions)


def test_a_claim_binds_the_scripts_variables_and_keeps_the_services_text_values():
    claim = ("x %(bucket_count)s %(product_id)s %(qty)s %(order_id)s %(reason)s", {"bucket_count": 2,
             "product_id": 7, "qty": 2, "order_id": 0, "reason": "re'serve"})  # fmt: skip

    assert buckets.claim_script(claim, 8) == "x 8 :p1 1 :o_id 're''serve' \\aset"


def test_a_recording_without_claims_before_a_full_pass_is_refused():
    sent = [("SELECT bucket, available_stock FROM stock_buckets FOR NO KEY UPDATE", {"product_id": 1})]

    with pytest.raises(ValueError, match="no longer sends claims"):
        service_trace.claims(sent)


def test_a_claim_parameter_the_benchmark_does_not_know_is_an_error():
    with pytest.raises(SystemExit, match="does not know: shard=3"):
        buckets.claim_script(("SELECT %(shard)s", {"shard": 3}), 8)
