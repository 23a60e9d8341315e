"""The HTTP queue cells (bench.cells): the seed's waiting passes and bench/checkout.lua's ``queue_poll`` modes, and
its ``queue_join`` mode, run by wrk as the bench runs them, against gunicorn on the test database. Every poll is a 200
with a waiting pass, an advance admits nobody, and any other answer (a forged signed pass's 403, an admitted pass's
200) counts as an error; every join is a customer's first in the workers (201), and a second (200) is an error."""

import json

import pytest
from django.conf import settings

from bench.seeding import QUEUED
from bench.wrk import run_wrk
from devtools import djangoctl
from devtools.processes import Gunicorn
from inventory.models import Product
from skincare.tests.test_metrics import _url as database_url_for_children
from waitingroom import services
from waitingroom.testing import admit_now

pytestmark = pytest.mark.wrk

PREFIX = "poll-bench"


@pytest.fixture
def bench_files(tmp_path):
    """Three bench customers' tokens (the bench's tokens file) and their waiting passes (the seed's passes file)."""
    tokens_json, passes = tmp_path / "tokens.json", tmp_path / "passes.txt"
    djangoctl.tokens(3, PREFIX, str(tokens_json))
    djangoctl.queue_passes(QUEUED, 1000, PREFIX, str(tokens_json), str(passes))
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("\n".join(json.loads(tokens_json.read_text())) + "\n")
    return tokens, passes


@pytest.fixture
def web():
    """gunicorn as the bench serves (sync workers, persistent connections), signing with this process's key."""
    env = {"DJANGO_SECRET_KEY": settings.SECRET_KEY, "ACCESS_LOG": "false"}
    with Gunicorn(database_url_for_children(), workers=2, conn_max_age=60, extra_env=env) as server:
        yield server


def _wrk(web: Gunicorn, mode: str, tokens, passes) -> dict:
    return run_wrk(web.base, mode, duration=1, connections=2, tokens_file=tokens, passes_file=passes,
                   workers=web.worker_pids())  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_each_customer_polls_its_own_waiting_pass_and_every_answer_is_a_200_waiting(bench_files, web):
    tokens, passes = bench_files
    lines = [line.split(" ") for line in passes.read_text().splitlines()]
    assert [token for token, _id, _signed in lines] == tokens.read_text().split()
    assert len({pass_id for _token, pass_id, _signed in lines}) == 3
    assert services.queue_advance(product_id=QUEUED).admitted == 0  # paused: the passes wait whatever advances

    for mode in ("queue_poll", "queue_poll_unsigned"):
        cell = _wrk(web, mode, tokens, passes)

        assert cell["requests"] > 0 and cell["per_s"] > 0 and cell["python_cpu_ms"] > 0, (mode, cell)
        assert cell["errors"] == 0, (mode, cell)


@pytest.mark.django_db(transaction=True)
def test_a_poll_answered_with_anything_but_a_waiting_pass_is_an_error(bench_files, web, tmp_path):
    tokens, passes = bench_files
    forged = tmp_path / "forged.txt"
    forged.write_text("".join(f"{line}x\n" for line in passes.read_text().splitlines()))  # signature altered: 403

    refused = _wrk(web, "queue_poll", tokens, forged)

    assert refused["requests"] > 0 and refused["errors"] == refused["requests"] and refused["per_s"] == 0
    services.queue_pause(product_id=QUEUED, paused=False)
    assert admit_now(Product.objects.get(pk=QUEUED)).admitted == 3
    admitted = _wrk(web, "queue_poll_unsigned", tokens, passes)  # 200, but an admitted pass

    assert admitted["requests"] > 0 and admitted["errors"] == admitted["requests"] and admitted["per_s"] == 0


@pytest.mark.django_db(transaction=True)
def test_each_join_is_a_customers_first_and_answered_201(bench_files, web, tmp_path):
    _tokens, passes = bench_files
    joiners_json, joiners = tmp_path / "joiners.json", tmp_path / "joiners.txt"
    djangoctl.tokens(5000, "join-bench", str(joiners_json))  # more than 1 s of joins on two connections
    joiners.write_text("\n".join(json.loads(joiners_json.read_text())) + "\n")

    cell = _wrk(web, "queue_join", joiners, passes)

    assert 0 < cell["requests"] < 5000 and cell["per_s"] > 0 and cell["python_cpu_ms"] > 0, cell
    assert cell["errors"] == 0, cell


@pytest.mark.django_db(transaction=True)
def test_control_a_join_by_a_customer_the_workers_answered_before_is_an_error(bench_files, web):
    tokens, passes = bench_files  # three customers: after each worker's first join of each, every join is a 200

    cell = _wrk(web, "queue_join", tokens, passes)

    assert cell["requests"] > 6 and cell["per_s"] * cell["seconds"] <= 6, cell  # at most 3 customers x 2 workers
    assert cell["errors"] >= cell["requests"] - 6, cell
