"""The light load client (bench/crowd.py) against a live server on the test database: it obeys ``poll_after``, keeps
the wait for a connection (lag) apart from the request's own time (latency), and flags its own saturation."""

import asyncio
import itertools
import json
import time

import pytest
from django.core.management import call_command

from bench.crowd import LOOP_LAG_BOUND_MS, Crowd, pct, saturated
from devtools.processes import BENCH_SECRET
from inventory.models import Product
from waitingroom import services
from waitingroom.testing import admit_now, sale_starts_in


@pytest.mark.django_db(transaction=True)
def test_the_crowd_obeys_poll_after_and_keeps_lag_apart_from_latency(live_server, settings, make_customer):
    settings.PAYMENT_WEBHOOK_SECRET = BENCH_SECRET  # the client pays with the bench's signed webhook
    settings.QUEUE_POLL_MAX_SECONDS = 2  # the waiting buyers poll within seconds, not half a minute
    call_command("load_demo_data", verbosity=0)
    call_command("flash_sale_setup", "--stock", "1", "--starts-in", "60", "--duration", "600", "--queue", verbosity=0)
    product = Product.objects.get(pk=101)
    sale_starts_in(product, -1)
    customers = [make_customer(f"crowd-{n}") for n in range(3)]
    for customer in customers:  # joined and placed before the client starts: its join answers 200, the same pass
        services.queue_join(customer=customer, product_id=101)
    admit_now(product)  # one unit: the first in line is admitted, the other two wait
    tokens = [customer.api_token for customer in customers]

    now = time.time()
    crowd = Crowd(
        live_server.url, tokens, join_times=[now] * 3, ends_at=now + 15, opens_at=now - 1, connections=1, trace=True
    )
    report = asyncio.run(crowd.run())

    assert report["finals"] == {"bought": 1, "sold_out": 2}, report["statuses"]
    assert report["unfinished"] == 0
    assert report["polls_answered"] == report["polls_due"] > 0
    trace = crowd.trace
    assert trace is not None
    # One connection: each request is written only once the previous one was answered, and a request that was due
    # while the connection was busy counts that wait as lag, not as latency.
    for before, after in itertools.pairwise(trace):
        assert after[3] >= before[4]
    joins = [entry for entry in trace if entry[1] == "join"]
    assert [entry[3] - entry[2] for entry in joins] == sorted(entry[3] - entry[2] for entry in joins)
    assert joins[2][3] - joins[2][2] >= (joins[0][4] - joins[0][3]) + (joins[1][4] - joins[1][3])
    assert sum(report["latency_ms"][step]["n"] for step in report["latency_ms"]) == len(trace)
    # Each poll is sent poll_after seconds after the answer that asked for it: never before, and late by no more
    # than the client's own lag (one connection, a few requests).
    polls = 0
    for n in range(3):
        mine = [entry for entry in trace if entry[0] == n]
        for previous, entry in itertools.pairwise(mine):
            asked = json.loads(previous[5]).get("poll_after")
            if entry[1] == "poll":
                polls += 1
                assert entry[2] == pytest.approx(previous[4] + asked, abs=1e-6)  # due exactly then
                assert 0 <= entry[3] - entry[2] < 0.5
    assert polls >= 2
    assert report["statuses"].get("poll 200", 0) == polls  # every poll answered (the signed pass accepted)
    assert report["client_saturated"] is False
    # Every buyer's first pass is counted once, at the answer that gave it, after the buyer arrived.
    assert report["joins_answered"] == 3 == len(report["joins_answered_at"])
    assert all(now <= at <= now + 15 for at in report["joins_answered_at"])
    assert 0 < report["join_answer_ms"]["p50"] <= report["join_answer_ms"]["max"] < 15_000


def test_the_saturation_flag_follows_the_stated_bounds():
    assert saturated(loop_lag_p99_ms=LOOP_LAG_BOUND_MS + 1, cpu_per_second=[0.1] * 10)
    assert saturated(loop_lag_p99_ms=1.0, cpu_per_second=[0.1, 0.95, 0.95, 0.95, 0.95, 0.95, 0.1])
    assert not saturated(loop_lag_p99_ms=1.0, cpu_per_second=[0.95, 0.95, 0.95, 0.95, 0.1, 0.95, 0.95])
    assert not saturated(loop_lag_p99_ms=None, cpu_per_second=[])


def crowd_result(*, polls_answered: bool) -> dict:
    """One mode's result as ``bench.waitline.run_mode`` returns it, its client report from ``Crowd.report``'s
    summaries: every step named, a step nothing answered with no figures."""
    latency = {"join": [0.012, 0.020], "poll": [0.003, 0.004] if polls_answered else [], "checkout": []}
    summary = {
        k: {"n": len(v), "p50": pct([s * 1000 for s in v], 0.5), "p99": pct([s * 1000 for s in v], 0.99)}
        for k, v in latency.items()
    }
    lags = {k: {"p50": v["p50"], "p99": v["p99"], "max": v["p99"]} for k, v in summary.items()}
    client = {
        "buyers": 2,
        "finals": {},
        "statuses": {"join 201": 2},
        "unfinished": 2,
        "answered_per_second_mean": 2.0,
        "answered_per_second_peak": 2,
        "joins_answered": 2,
        "join_rate_mean": 2.0,
        "join_rate_peak": 2,
        "join_answer_ms": {"p50": 12.0, "p99": 20.0, "max": 20.0},
        "polls_due": 10,
        "polls_answered": 2 if polls_answered else 0,
        "polls_sustained_ratio": None,
        "latency_ms": summary,
        "lag_ms": lags,
        "client_cpu_seconds": 0.1,
        "client_cpu_ms_per_request": 0.5,
        "client_max_rss_mb": 50,
        "loop_lag_p99_ms": 1.0,
        "client_saturated": False,
    }
    phases = {"idle": None, "joining": {"cpu_cores": 0.5, "xacts_per_s": 10.0}, "selling": None, "sold out": None}
    return {
        "mode": "signed pass",
        "client": client,
        "primary": phases,
        "passes_recorded": 2,
        "unrecorded": {"most": 0, "oldest_ms": 0.0},
        "record_bound_ms": 500,
        "per_join": None,
        "xacts_per_poll_sold_out_net_of_idle": None,
        "web_cpu_seconds": 1.0,
        "server_ms": {},
        "paid_units": 0,
        "held_units": 0,
        "violations": ["sold 0 of 5"],
    }


def test_the_crowd_report_says_which_step_nothing_answered():
    from bench.waitline import side_by_side

    assert dict(Crowd.ms({"join": [0.002]})) == {"join": [2.0], "poll": [], "checkout": []}  # every step named

    table = side_by_side([crowd_result(polls_answered=False), crowd_result(polls_answered=True)])
    poll_row = next(line for line in table.splitlines() if line.startswith("poll p50 / p99 ms (client)"))
    assert "none answered" in poll_row and "4.0" in poll_row  # the mode whose polls were answered shows them
    assert "none answered" in next(line for line in table.splitlines() if line.startswith("checkout p99"))
    assert "none sent" in next(line for line in table.splitlines() if line.startswith("poll lag p99"))


def test_the_unwritten_passes_are_the_answered_ones_a_sample_did_not_count():
    from bench.waitline import Sample, unrecorded

    answered = [10.0, 10.1, 10.2, 11.0]
    caught_up = [Sample(10.5, 0.0, 0, 3, 0), Sample(11.5, 0.0, 0, 4, 0)]
    assert unrecorded(caught_up, answered) == {"most": 0, "oldest_ms": 0.0}
    # Control: a sample at 12.0 that counts two passes proves two unwritten, the oldest answered at 10.2.
    behind = [*caught_up, Sample(12.0, 0.0, 0, 2, 0)]
    assert unrecorded(behind, answered) == {"most": 2, "oldest_ms": 1800.0}
    # A pass answered after the sample is not owed by it.
    assert unrecorded([Sample(10.05, 0.0, 0, 0, 0)], answered) == {"most": 1, "oldest_ms": 50.0}


def test_the_cost_per_join_is_the_joining_phase_net_of_idle_over_its_joins():
    from bench.waitline import per_join

    idle = {"xacts_per_s": 2.0, "cpu_cores": 0.01, "token_lookups_per_s": 0.0}
    joining = {"from": 100.0, "to": 110.0, "seconds": 10.0, "xacts_per_s": 102.0, "cpu_cores": 0.11}
    joining["token_lookups_per_s"] = 90.0
    answered = [99.0] + [100.0 + n / 100 for n in range(1000)] + [111.0]  # 1,000 joins inside the phase
    assert per_join(joining, idle, answered) == {
        "joins": 1000,
        "xacts": 1.0,
        "token_lookups": 0.9,
        "xacts_besides_lookups": 0.1,
        "cpu_ms": 1.0,
    }
    assert per_join(joining, idle, [99.0]) is None  # no join inside the phase: no cost per join
    assert per_join(None, idle, answered) is None


def test_make_bench_states_the_first_minute_and_whether_it_was_exact():
    from bench.waitline import first_minute, parse_args

    args = parse_args(["--mode", "pass"])
    result = crowd_result(polls_answered=True)
    result["client"]["statuses"]["poll 503"] = 1
    lines = first_minute(result, args).splitlines()
    row = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1].rstrip(" |") for line in lines if " | " in line}
    assert row["joins answered / passes in the database"] == "2 / 2"
    assert row["join answer p50 / p99 / max ms (arrival to pass, at the client)"] == "12.0 / 20.0 / 20.0"
    assert row["5xx, time-outs, no answer"] == "1"
    assert row["units paid (stock); exact"] == "0 (500); NO"  # the result's violations say it was not exact
    result["violations"] = []
    assert "0 (500); yes |" in first_minute(result, args)
