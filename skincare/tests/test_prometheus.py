"""deploy/prometheus/: the alert rules pass ``promtool check rules`` and their own ``promtool test rules`` (each rule
with a series that fires it and one that does not, and a control: rules that always fire fail those tests), the
scrape config passes ``promtool check config``, and a real Prometheus (Debian's package) scrapes a live stack of
two web instances and two sweepers and fires ``SkincareSweeperDown`` when the test stops a sweeper.

Needs Debian's ``prometheus`` (``promtool`` and ``prometheus``; ``make prometheus-deps`` installs it as root):
marked ``prometheus``, deselected by ``make test`` with a warning when it cannot be installed (required under CI),
and failing loudly when run without it.
"""

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from devtools.processes import PY, ROOT, Gunicorn, django_env, free_port
from devtools.testing import wait_until
from skincare.tests.test_metrics import _url as database_url_for_children

pytestmark = pytest.mark.prometheus

DEPLOY = ROOT / "deploy" / "prometheus"
PROMTOOL, PROMETHEUS = "/usr/bin/promtool", "/usr/bin/prometheus"


def binary(path: str) -> str:
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(
            f"{path} is missing: apt-get install prometheus (make prometheus-deps does it as root)", pytrace=False
        )
    return path


def promtool(*args: str, cwd: Path = DEPLOY) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - Debian's promtool
        [binary(PROMTOOL), *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def alert_rules() -> list[dict]:
    return [rule for group in yaml.safe_load((DEPLOY / "alerts.yml").read_text())["groups"] for rule in group["rules"]]


def test_alert_rules_pass_promtool_check():
    result = promtool("check", "rules", "alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in result.stdout


def test_every_alert_fires_and_stays_quiet_in_promtool_test_rules():
    result = promtool("test", "rules", "alerts_test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
    tests = yaml.safe_load((DEPLOY / "alerts_test.yml").read_text())["tests"]
    firing, quiet = set(), set()
    for test in tests:
        for check in test["alert_rule_test"]:
            (firing if check["exp_alerts"] else quiet).add(check["alertname"])
    names = {rule["alert"] for rule in alert_rules()}
    assert len(names) >= 11
    assert names == firing == quiet, f"without a firing case: {names - firing}; without a quiet case: {names - quiet}"


def test_control_rules_that_always_fire_fail_the_rule_tests(tmp_path):
    shutil.copy(DEPLOY / "alerts_test.yml", tmp_path)
    always = re.sub(
        r"expr: \|\n(?:          .*\n)+|expr: .*\n", "expr: vector(1)\n", (DEPLOY / "alerts.yml").read_text()
    )
    assert always.count("expr: vector(1)") == len(alert_rules())
    (tmp_path / "alerts.yml").write_text(always)
    result = promtool("test", "rules", "alerts_test.yml", cwd=tmp_path)
    assert result.returncode != 0
    assert "FAILED" in result.stdout + result.stderr


def live_config(tmp_path: Path, *, web: list[str], sweepers: list[str], token_file: Path) -> Path:
    """deploy/prometheus/prometheus.yml with these targets, scraped and evaluated every second, and the alert rules
    with every ``for:`` cut to 0s (promtool test rules checks the real durations)."""
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "900ms"}
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    jobs["skincare-web"]["static_configs"] = [{"targets": web}]
    jobs["skincare-web"]["authorization"]["credentials_file"] = str(token_file)
    jobs["skincare-sweeper"]["static_configs"] = [{"targets": sweepers}]
    rules = re.sub(r"for: \S+", "for: 0s", (DEPLOY / "alerts.yml").read_text())
    (tmp_path / "alerts.yml").write_text(rules)
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_scrape_config_passes_promtool_check(tmp_path):
    token = tmp_path / "token"
    token.write_text("x")
    config = live_config(tmp_path, web=["127.0.0.1:1"], sweepers=["127.0.0.1:2"], token_file=token)
    result = promtool("check", "config", str(config), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def api(base: str, path: str, **params: str) -> dict:
    url = f"{base}/api/v1/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.loads(response.read())
    assert body["status"] == "success", body
    return body["data"]


def targets_up(base: str) -> dict[str, str]:
    return {t["scrapeUrl"]: t["health"] for t in api(base, "targets")["activeTargets"]}


def firing(base: str) -> list[dict]:
    return [a for a in api(base, "alerts")["alerts"] if a["state"] == "firing"]


def query(base: str, expr: str) -> dict[str, float]:
    return {
        json.dumps(r["metric"], sort_keys=True): float(r["value"][1]) for r in api(base, "query", query=expr)["result"]
    }


@pytest.mark.django_db(transaction=True)
def test_prometheus_scrapes_a_live_stack_and_a_stopped_sweeper_fires(tmp_path, make_product, make_customer):
    prometheus_bin = binary(PROMETHEUS)
    database = database_url_for_children()
    product = make_product(stock=3)
    buyer = make_customer()
    token = secrets.token_urlsafe(24)
    token_file = tmp_path / "metrics-token"
    token_file.write_text(token)
    started: list = []
    sweepers: list[tuple[subprocess.Popen, int]] = []
    prometheus = None
    logs: list = []
    try:
        webs = []
        for _ in range(2):
            web = Gunicorn(
                database, workers=1, conn_max_age=0, extra_env={"ACCESS_LOG": "false", "METRICS_TOKEN": token}
            )
            started.append(web.start())
            webs.append(web)
        for _ in range(2):
            port = free_port()
            log = (tmp_path / f"sweeper-{port}.log").open("w")  # closed at the end
            logs.append(log)
            proc = subprocess.Popen(  # noqa: S603 - our own manage.py
                [
                    PY,
                    "manage.py",
                    "expire_reservations",
                    "--loop",
                    "--interval",
                    "1",
                    "--audit-every",
                    "2",
                    "--metrics-port",
                    str(port),
                    "-v0",
                ],
                cwd=ROOT,
                env=django_env(database),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            sweepers.append((proc, port))
        # One checkout on each instance, so the checkout series exist.
        for web in webs:
            request = urllib.request.Request(
                f"{web.base}/v1/checkout",
                data=json.dumps({"items": [{"product_id": product.pk, "qty": 1}]}).encode(),
                headers={"Authorization": f"Bearer {buyer.api_token}", "Content-Type": "application/json"},
                method="POST",
            )
            with urllib.request.urlopen(request, timeout=30) as response:
                assert response.status == 201

        web_targets = [f"127.0.0.1:{web.port}" for web in webs]
        sweeper_targets = [f"127.0.0.1:{port}" for _proc, port in sweepers]
        config = live_config(tmp_path, web=web_targets, sweepers=sweeper_targets, token_file=token_file)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        prometheus = subprocess.Popen(  # noqa: S603 - Debian's prometheus
            [
                prometheus_bin,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / "prometheus.log", "w"),  # noqa: SIM115
        )

        def all_up() -> bool:
            try:
                health = targets_up(base)
            except OSError:
                return False
            return len(health) == 4 and set(health.values()) == {"up"}

        wait_until(all_up, timeout=60, what="Prometheus scraping 2 web instances and 2 sweepers, all up")
        # What it scraped: both instances' checkouts (through the Bearer token), the sweepers' probe and audit.
        wait_until(
            lambda: len(query(base, "skincare_audit_last_run_timestamp_seconds")) == 2,
            timeout=30,
            what="both sweepers' audit exported",
        )
        created = query(base, 'sum(skincare_checkout_requests_total{outcome="created"})')
        assert list(created.values()) == [2.0]
        # The probe's gauges come from the sweepers only (a web worker would export an unset gauge as 0).
        assert sorted(query(base, "skincare_database_up").values()) == [1.0, 1.0]
        assert {json.loads(k)["job"] for k in query(base, "skincare_database_up")} == {"skincare-sweeper"}
        assert set(query(base, "max by (check) (skincare_audit_violations)").values()) == {0.0}
        # A sweeper's first scrape can precede its first sweep (last sweep 0: "behind" for one evaluation).
        wait_until(
            lambda: not [a for a in firing(base) if a["labels"]["alertname"].startswith("SkincareSweeper")],
            timeout=30,
            what="no sweeper alert while both sweepers run",
        )

        # Stop sweeper 0: SkincareSweeperDown fires for it, and for it only.
        stopped_proc, stopped_port = sweepers[0]
        stopped_proc.send_signal(signal.SIGTERM)
        stopped_proc.wait(timeout=30)

        def sweeper_down() -> list[dict]:
            return [a for a in firing(base) if a["labels"]["alertname"] == "SkincareSweeperDown"]

        started_waiting = time.monotonic()
        [alert] = wait_until(sweeper_down, timeout=60, what="SkincareSweeperDown firing")
        assert alert["labels"]["instance"] == f"127.0.0.1:{stopped_port}"
        assert alert["labels"]["job"] == "skincare-sweeper"
        assert alert["annotations"]["runbook"] == "docs/runbooks/alerts.md#skincaresweeperdown"
        assert time.monotonic() - started_waiting < 60
        assert not [a for a in firing(base) if a["labels"]["alertname"] == "SkincareWebInstanceDown"]
    finally:
        if prometheus is not None and prometheus.poll() is None:
            prometheus.terminate()
            prometheus.wait(timeout=30)
        for proc, _port in sweepers:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
        for item in reversed(started):
            item.stop()
        for log in logs:
            log.close()
