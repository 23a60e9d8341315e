"""The one results table: medians over the rounds, each row's ratio to its baseline row of the same run, the block
written between its markers of docs/benchmarks.md and nowhere else; ``python -m bench`` names its measurements."""

import json
import re

import pytest

from bench import __main__ as bench_main
from bench import ab, cpu, table


def _cell(row: str, round_: int, per_s: float, pg: float, **extra: object) -> dict:
    return {"row": row, "round": round_, "per_s": per_s, "p99_ms": 10.0 * round_, "python_cpu_ms": 1.0,
            "pg_cpu_ms": pg, "other_cpu_pct": 5.0, "errors": 0, "status_5xx": 0, "audit_clean": True} | extra  # fmt: skip


def test_rows_are_the_medians_over_the_rounds_with_errors_summed_and_the_worst_audit():
    cells = [_cell("a", 1, 100, 1.0), _cell("a", 2, 300, 3.0), _cell("a", 3, 200, 2.0, errors=2, audit_clean=False),
             _cell("b", 1, 50, 1.0, status_5xx=1)]  # fmt: skip

    rows = table.summarise(cells, {"a": None, "b": "a", "not run": "a"})

    assert [r["row"] for r in rows] == ["a", "b"]
    a, b = rows
    assert (a["per_s"], a["pg_cpu_ms"], a["p99_ms"], a["errors"], a["audit_clean"]) == (200, 2.0, 20.0, 2, False)
    assert (b["baseline"], b["errors"], b["audit_clean"]) == ("a", 1, True)


def test_each_ratio_is_of_the_row_over_its_baseline_row():
    rows = table.summarise([_cell("base", 1, 200, 1.0), _cell("x", 1, 100, 3.0)], {"base": None, "x": "base"})
    rows += cpu.rows({"healthz": {"python_cpu_ms": 0.2, "pg_cpu_ms": 0.0, "rounds_ms": [0.2]},
                      "checkout": {"python_cpu_ms": 1.0, "pg_cpu_ms": 0.6, "rounds_ms": [1.0]}})  # fmt: skip

    by_row = {r["row"]: r for r in table.ratios(rows)}

    assert (by_row["base"]["ratio_per_s"], by_row["base"]["ratio_cpu"]) == (None, None)
    assert (by_row["x"]["ratio_per_s"], by_row["x"]["ratio_cpu"]) == (0.5, 2.0)  # (1 + 3) / (1 + 1)
    checkout = by_row["in-process checkout, one unit"]
    assert (checkout["ratio_per_s"], checkout["ratio_cpu"]) == (None, pytest.approx(8.0))
    block = table.markdown(rows, "the run")
    assert block.startswith("the run\n\n| row | per second |")
    assert "| x | 100 | 10.0 | 1.000 | 3.000 | base | 0.50 | 2.00 | 0 | 5 |" in block
    assert "| base | 200 | 10.0 | 1.000 | 1.000 | (reference) | - | - | 0 | 5 |" in block


def test_the_block_replaces_the_previous_run_between_the_markers_only(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# B\n\nbefore\n\n{table.MARK_START}\nold table\n{table.MARK_END}\n\n## Decisions\n")

    table.write_block("new table", doc)
    table.write_block("newer table", doc)

    assert doc.read_text() == f"# B\n\nbefore\n\n{table.MARK_START}\nnewer table\n{table.MARK_END}\n\n## Decisions\n"
    doc.write_text("# no markers\n")
    with pytest.raises(SystemExit, match="no <!-- bench:table:start -->"):
        table.write_block("x", doc)


def test_the_page_has_the_markers_and_the_machine_is_described():
    text = table.DOCS.read_text()
    assert text.count(table.MARK_START) == text.count(table.MARK_END) == 1
    assert "## Decisions" in text
    facts = table.machine()
    assert facts["cores"] and facts["commit"] != "unknown"
    header = table.header(facts | {"cores": 8}, {"fsync": "on"}, "the run")
    assert header.startswith("the run\n\nMachine: ") and ", 8 cores, " in header and "PostgreSQL: fsync on." in header


def test_an_ab_combines_each_sides_runs_by_their_median_and_gives_the_ratio():
    run = lambda py: {"checkout": {"python_cpu_ms": py, "pg_cpu_ms": 0.5}}  # noqa: E731
    combined = ab.combine({"this tree": [run(1.0), run(3.0), run(1.2)], "ref": [run(1.5), run(1.5), run(1.4)]})

    assert combined == {"this tree": {"checkout": {"python_cpu_ms": 1.2, "pg_cpu_ms": 0.5}},
                        "ref": {"checkout": {"python_cpu_ms": 1.5, "pg_cpu_ms": 0.5}}}  # fmt: skip
    assert cpu.text_table(combined).splitlines()[1] == "checkout | 1.200 / 0.500 | 1.500 / 0.500 | 0.80"


def test_an_ab_against_a_tree_without_a_scenario_compares_the_others_and_names_it():
    results = {"this tree": {"checkout": {"python_cpu_ms": 1.2, "pg_cpu_ms": 0.5},
                             "queue_join_drf": {"python_cpu_ms": 0.3, "pg_cpu_ms": 0.0}},
               "ref": {"checkout": {"python_cpu_ms": 1.5, "pg_cpu_ms": 0.5}}}  # fmt: skip

    assert cpu.text_table(results).splitlines()[1:] == [
        "checkout | 1.200 / 0.500 | 1.500 / 0.500 | 0.80",
        "not run by every side: queue_join_drf",
    ]


@pytest.mark.django_db
def test_the_in_process_rounds_interleave_the_scenarios_and_clean_up_after_each_round():
    calls: list[str] = []
    cleaned: list[int] = []

    results = cpu.measure({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, rounds=3, requests=4,
                          warmup=2, after_round={"b": lambda: cleaned.append(len(calls))})  # fmt: skip

    assert calls[:4] == ["a", "a", "b", "b"]  # the warm-ups
    timed = "".join(calls[4:])
    assert timed == "aaaabbbb" + "bbbbaaaa" + "aaaabbbb"  # the order rotated every round
    assert cleaned == [4, 12, 16, 28]  # after the warm-ups and after each of b's rounds
    assert set(results) == {"a", "b"} and len(results["a"]["rounds_ms"]) == 3


def test_the_worker_runs_in_the_settings_of_the_tree_it_measures(tmp_path):
    assert cpu.settings_module(tmp_path) == "skincare.settings"
    (tmp_path / "config").mkdir()
    (tmp_path / "config/settings.py").write_text("")
    assert cpu.settings_module(tmp_path) == "config.settings"


def test_python_m_bench_names_its_measurements(capsys):
    assert bench_main.main(["nonsense"]) == 2
    usage = capsys.readouterr().out
    assert all(f"python -m bench {name}" in usage for name in bench_main.COMMANDS)


def test_each_decision_names_rows_the_bench_measures():
    from bench import cells

    decisions = table.DOCS.read_text().partition("## Decisions")[2]
    named = {" ".join(name.split()) for name in re.findall(r"(?<!\*)\*([^*]+)\*(?!\*)", decisions)}
    rows = {cell.row for cell in cells.CELLS}
    rows |= {
        row["row"]
        for row in cpu.rows({n: {"python_cpu_ms": 1, "pg_cpu_ms": 0, "rounds_ms": []} for n in cpu.SCENARIOS})
    }

    assert named and named <= rows, named - rows
    bullets = decisions.split("\n- ")[1:]
    assert bullets and all(re.search(r"\brow\b", bullet, re.IGNORECASE) for bullet in bullets)


def test_the_load_tests_server_latencies_come_from_the_access_lines_of_its_own_run(tmp_path):
    from bench import loadtest

    def line(method, path, status, ms):
        return json.dumps({"method": method, "path": path, "status": status, "duration_ms": ms}) + "\n"

    log = tmp_path / "gunicorn.log"
    log.write_text(line("GET", "/v1/queue/passes/1", 200, 99.0) + "[INFO] Booting worker\n")
    offset = log.stat().st_size
    with log.open("a") as f:
        f.writelines(line("GET", f"/v1/queue/passes/{i}", 200, float(i)) for i in range(1, 101))
        f.write(line("POST", "/v1/checkout", 503, 2.0))
    by_kind = loadtest.server_latencies(log, offset)
    assert by_kind["poll"] == {"n": 100, "p50_ms": 51.0, "p99_ms": 100.0, "503": 0}  # the earlier line left out
    assert by_kind["checkout"] == {"n": 1, "p50_ms": 2.0, "p99_ms": 2.0, "503": 1}
    assert by_kind["503 (application)"] == {"n": 1, "p50_ms": 2.0, "p99_ms": 2.0, "503": 0}


def test_the_load_tests_front_latencies_tell_the_fronts_503s_from_the_requests_it_passed_on(tmp_path):
    from bench import loadtest

    def line(status, tsc, tw, ta):
        return json.dumps({"status": status, "tsc": tsc, "tw": tw, "ta": ta, "method": "GET", "path": "/x"}) + "\n"

    log = tmp_path / "haproxy.log"
    log.write_text(line(503, "sQ--", -1, 9999) + "[NOTICE] haproxy started\n")
    offset = log.stat().st_size
    with log.open("a") as f:
        f.writelines(line(200, "----", i, i + 1) for i in range(100))
        f.write(line(503, "----", 5, 6))  # the application's own 503, passed on by the front
        f.write(line(503, "sQ--", -1, 2000))  # the queue timeout: the front answered
    by_source = loadtest.front_latencies(log, offset)
    assert by_source["503 (front)"] == {"n": 1, "p50_ms": 2000.0, "p99_ms": 2000.0}  # the earlier line left out
    assert by_source["queued at the front"] == {"n": 101, "p50_ms": 49.0, "p99_ms": 98.0}
