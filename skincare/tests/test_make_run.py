"""`make run` is the whole shop: the real `make run` (PORT = a free port, DATABASE_URL = this run's test
database, nothing else exported for the project) serves the API, runs the sweeper, prints where everything is, and
stops with no process left behind.

With RESERVATION_TTL_SECONDS=5 an unpaid order is cancelled and its unit is back within seconds, with nothing else
started. The README's curl and webhook-signing examples run against it (only ``localhost:8000`` becomes the test's
port). The test waits on make run's own output lines (a reader thread, a condition), never on a guessed pause."""

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import requests

from devtools.processes import free_port
from skincare import demo
from skincare.tests.test_documented_commands import newcomer_env
from skincare.tests.test_production import production_env

ROOT = Path(__file__).resolve().parents[2]
TOKEN = {"Authorization": f"Bearer {demo.DEMO_CUSTOMER_TOKEN}"}


class MakeRun:
    def __init__(self, tmp_path: Path, **extra_env: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = tmp_path / "make-run.log"
        env = newcomer_env(tmp_path)
        env.pop("PYTHONUNBUFFERED", None)  # make run's own output must come through without it
        env.update(PORT=str(self.port), **extra_env)
        self.env = env
        # Its own session, like a terminal's foreground job: Ctrl-C = SIGINT to this process group.
        self.process = subprocess.Popen(
            ["make", "--no-print-directory", "run"],  # noqa: S607
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            text=True,
            errors="replace",
        )
        self.lines: list[str] = []
        self.ended = False
        self.changed = threading.Condition()
        threading.Thread(target=self._read, name="make-run-output", daemon=True).start()

    def _read(self) -> None:
        """Every line make run prints, into ``lines`` and the log file, waking whoever waits for one."""
        assert self.process.stdout is not None
        with self.log.open("w") as out:
            for line in self.process.stdout:
                out.write(line)
                out.flush()
                with self.changed:
                    self.lines.append(line)
                    self.changed.notify_all()
        with self.changed:
            self.ended = True
            self.changed.notify_all()

    def output(self) -> str:
        """What make run printed so far (all of it once it has exited)."""
        with self.changed:
            if self.process.poll() is not None:
                self.changed.wait_for(lambda: self.ended, timeout=30)
            return "".join(self.lines)

    def wait_for_line(self, text: str, timeout: float) -> None:
        """Until make run prints a line containing ``text``; fails when it exits first or ``timeout`` passes."""
        with self.changed:
            printed = self.changed.wait_for(lambda: self.ended or any(text in line for line in self.lines), timeout)
            if not printed or not any(text in line for line in self.lines):
                raise AssertionError(f"make run printed no {text!r} (exited: {self.ended}):\n{''.join(self.lines)}")

    def wait_ready(self, timeout: float = 300) -> None:
        """Until gunicorn listens and the sweeper has started (make run migrates and loads the demo data first);
        then the API must be ready (a connection waits in the listen backlog while the workers boot)."""
        started = time.monotonic()
        self.wait_for_line("Listening at", timeout)
        self.wait_for_line("sweeper.1 started", timeout - (time.monotonic() - started))
        assert requests.get(f"{self.base}/readyz", timeout=60).status_code == 200, self.output()

    def tree(self) -> list[psutil.Process]:
        """make and everything below it (honcho, its shells, gunicorn master and workers, the sweeper)."""
        top = psutil.Process(self.process.pid)
        return [top, *top.children(recursive=True)]

    def stop(self, how: str) -> list[psutil.Process]:
        """Stop as a user would; returns the processes still alive after a grace period (must be none)."""
        processes = self.tree()
        if how == "SIGTERM":  # `kill <pid of make>`, a service manager stopping the job
            self.process.send_signal(signal.SIGTERM)
        else:  # Ctrl-C in the terminal: SIGINT to the whole foreground process group
            os.killpg(self.process.pid, signal.SIGINT)
        self.process.wait(timeout=60)
        _gone, alive = psutil.wait_procs(processes, timeout=15)
        return alive

    def kill_leftovers(self) -> None:
        if self.process.poll() is None:
            for process in reversed(self.tree()):
                process.kill()
            self.process.wait()


@pytest.fixture
def make_run(tmp_path: Path) -> Iterator[MakeRun]:
    run = MakeRun(tmp_path, RESERVATION_TTL_SECONDS="5")
    yield run
    run.kill_leftovers()


def order(run: MakeRun, order_id: int) -> dict:
    return requests.get(f"{run.base}/v1/orders/{order_id}", headers=TOKEN, timeout=10).json()


def available(run: MakeRun) -> int:
    return requests.get(f"{run.base}/v1/products/101", timeout=10).json()["available_stock"]


def run_readme_block(make_run, marker):
    """The README's shell block containing ``marker``, run verbatim in bash (strict mode) but for the port."""
    script = readme_block(marker).replace("localhost:8000", f"localhost:{make_run.port}")
    return subprocess.run(  # noqa: S603
        ["bash", "-euo", "pipefail", "-c", script],  # noqa: S607
        cwd=ROOT,
        env=make_run.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def readme_block(containing: str) -> str:
    """The shell block of the README (or of docs/runbooks/payments.md, where the webhook's signing example lives)."""
    docs = (ROOT / "README.md", ROOT / "docs" / "runbooks" / "payments.md")
    blocks = [block for doc in docs for block in re.findall(r"```sh\n(.*?)```", doc.read_text(), re.S)]
    return next(block for block in blocks if containing in block)


@pytest.mark.django_db(transaction=True)
def test_make_run_returns_unpaid_units_within_seconds_and_sigterm_leaves_no_process(make_run: MakeRun) -> None:
    make_run.wait_ready()
    banner = make_run.output()
    for where in ("/v1/products", "/v1/docs", "/admin/", "/metrics"):
        assert f"{make_run.base}{where}" in banner, banner
    assert f"demo login: {demo.DEMO_OPS_USER} / {demo.DEMO_OPS_PASSWORD}" in banner

    before = available(make_run)
    created = requests.post(
        f"{make_run.base}/v1/checkout",
        json={"items": [{"product_id": 101, "qty": 1}]},
        headers=TOKEN,
        timeout=10,
    )
    assert created.status_code == 201, created.text
    order_id = created.json()["order_id"]
    assert available(make_run) == before - 1

    # Nobody pays; nothing else is started. make run's own sweeper cancels it once the 5 s have passed, and says so.
    make_run.wait_for_line("1 orders cancelled (payment_timeout)", timeout=60)
    assert order(make_run, order_id)["status"] == "cancelled"
    assert available(make_run) == before

    # The README's examples, verbatim but for the port: the catalogue, checkout, replay, order, cancel, probes …
    shown = run_readme_block(make_run, "curl -s localhost:8000/v1/products")
    assert shown.returncode == 0, shown.stderr
    assert re.search(r'"status":\s*"pending_payment"', shown.stdout), shown.stdout
    assert '"internal_error"' not in shown.stdout
    assert '"not_found"' not in shown.stdout  # the cart's id went into the cart URLs
    assert '"cart_not_found"' not in shown.stdout
    # … and the webhook signed with the secret read from .env: the signature is accepted (not 401).
    signed = run_readme_block(make_run, "openssl dgst")
    assert signed.returncode == 0, signed.stderr
    assert signed.stdout.startswith("{") and "invalid_signature" not in signed.stdout, signed.stdout

    alive = make_run.stop("SIGTERM")
    assert alive == []
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{make_run.base}/healthz", timeout=2)


@pytest.mark.django_db(transaction=True)
def test_one_ctrl_c_stops_web_and_sweeper_with_no_process_left(make_run: MakeRun) -> None:
    make_run.wait_ready()
    names = " ".join(" ".join(p.cmdline()) for p in make_run.tree())
    assert "gunicorn" in names and "expire_reservations --loop" in names  # both run under make
    alive = make_run.stop("Ctrl-C")
    assert alive == []
    out = make_run.output()
    assert "SIGINT received" in out and "expire_reservations: stopped" in out


@pytest.mark.django_db(transaction=True)
def test_make_run_with_production_in_the_environment_is_production_and_refuses_the_demo(tmp_path: Path) -> None:
    """`DJANGO_ENV=production make run` (even with real secrets exported) is production: the demo data is refused,
    nothing is served. The control is the tests above: the same `make run` without DJANGO_ENV serves the demo."""
    real = {k: v for k, v in production_env().items() if k.startswith(("DJANGO_", "PAYMENT_", "METRICS_"))}
    run = MakeRun(tmp_path, **real)
    try:
        assert run.process.wait(timeout=300) != 0, run.output()
        out = run.output()
        assert "refusing to load the demo data with DJANGO_ENV=production" in out, out
        assert "sandbox payments on" not in out and "Listening at" not in out, out
    finally:
        run.kill_leftovers()
