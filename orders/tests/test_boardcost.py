"""``python -m devtools.boardcost`` (docs/operations.md#what-one-refresh-costs) runs end to end: a short load with
the board refreshing, each statement under EXPLAIN ANALYZE. A smoke run with small numbers; the documented run is
the same code with more seconds and history."""

import re
import subprocess

from devtools.processes import PY, ROOT, without_runtime_dir_warning


def test_boardcost_runs_and_reports_each_statement():
    result = subprocess.run(  # noqa: S603 - our own module
        [PY, "-m", "devtools.boardcost", "--seconds", "3", "--shoppers", "2", "--every", "0.2", "--history", "1000"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = "\n".join(without_runtime_dir_warning(result.stdout + result.stderr))
    assert result.returncode == 0, output
    assert re.search(r"database at the end: \d{4,} ledger rows", output), output
    for statement in ("LEDGER_CUTOFF_SQL", "PRODUCTS_SQL", "SERIES_SQL", "SWEEPER_LAG_SQL"):
        assert re.search(rf"{statement}\s+execution [\d.]+ ms", output), output
    assert re.search(r"all statements: [\d.]+ ms of execution per refresh", output), output
    refreshes = int(re.search(r", (\d+) refreshes under load\)", output).group(1))
    assert refreshes >= 2
