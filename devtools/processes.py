"""Shared plumbing for the bench (``python -m bench``: its cells and the load test), ``devtools.djangoctl``
and the rehearsals (``devtools.scaleout``, ``devtools.failover``): databases, manage.py,
Django setup, gunicorn, sweepers, metrics, signed webhooks, free ports.

Every process started here gets an explicit ``DATABASE_URL`` and talks to 127.0.0.1 only.
"""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from email.message import Message
from pathlib import Path
from typing import IO, Any, Self
from urllib.parse import parse_qs, urlparse, urlunparse

from devtools import devdb
from skincare import demo

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
RESULTS = ROOT / "bench-results"  # git-ignored
BENCH_SECRET = demo.BENCH_WEBHOOK_SECRET  # a load-test secret for a local server (published: production refuses it)
BENCH_SECRET_KEY = demo.BENCH_SECRET_KEY


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def without_runtime_dir_warning(text: str) -> list[str]:
    """The lines of a child's output without platformdirs' XDG_RUNTIME_DIR warning (two lines, every process)."""
    return [line for line in text.splitlines() if "XDG_RUNTIME_DIR" not in line and "user_runtime_dir" not in line]


def setup_django_quietly() -> None:
    """``django.setup()`` with config.settings unless set, and warnings silenced (bulk helpers, not tests). Without
    DATABASE_URL, the embedded server's (the settings read the variable only)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    if not os.environ.get("DATABASE_URL") and devdb.url() is not None:
        os.environ["DATABASE_URL"] = devdb.url() or ""
    import warnings

    warnings.simplefilter("ignore")
    import django

    django.setup()


def server_url(dbname: str) -> str:
    """URL of ``dbname`` on the embedded server (started if needed); with DATABASE_URL set, the same server."""
    if os.environ.get("DATABASE_URL"):
        parts = urlparse(os.environ["DATABASE_URL"])
        return urlunparse(parts._replace(path="/" + dbname))
    out = subprocess.run(
        [PY, "-m", "devtools.devdb", "ensure", "--dbname", "postgres"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return urlunparse(urlparse(out)._replace(path="/" + dbname))


def admin_conninfo(url: str) -> str:
    """The ``postgres`` maintenance database on the server that ``url`` points at."""
    parts = urlparse(url)
    return urlunparse(parts._replace(path="/postgres", scheme="postgresql"))


def recreate_database(url: str) -> None:
    """Drop and create the database that ``url`` names (a throwaway benchmark database), then migrate."""
    import psycopg

    name = urlparse(url).path.lstrip("/")
    if not name.startswith(("skincare_bench", "skincare_loadtest", "skincare_naive", "skincare_scaleout")):
        raise SystemExit(
            f"refusing to drop {name!r}: only skincare_bench*/skincare_loadtest*/skincare_naive*/skincare_scaleout*"
        )
    with psycopg.connect(admin_conninfo(url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    manage(url, "migrate", "--noinput", "-v0")
    manage(url, "load_demo_data")


def django_env(url: str, **extra: Any) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"DATABASE_URL": url, "PAYMENT_WEBHOOK_SECRET": BENCH_SECRET, "LOG_LEVEL": "WARNING"})
    # Bench-only: a labelled non-production secret key, and no cap on a customer's pending orders or open carts (the
    # benchmark's few customers check out thousands of times; the caps are measured by the test suite, not here).
    env.setdefault("DJANGO_SECRET_KEY", BENCH_SECRET_KEY)
    env.setdefault("MAX_PENDING_ORDERS_PER_CUSTOMER", "0")
    env.setdefault("MAX_OPEN_CARTS_PER_CUSTOMER", "0")  # likewise the open-cart cap (carts/tests/test_cart_cap.py)
    # Measured servers run with what is set here, not with the developer's .env (make run's sandbox, say).
    env.setdefault("DJANGO_READ_DOT_ENV_FILE", "false")
    env["DJANGO_ENV"] = "development"  # measured with the bench values, which production refuses
    env.update({k: str(v) for k, v in extra.items()})
    return env


def manage(
    url: str, *args: str, check: bool = True, quiet: bool = False, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``manage.py`` with ``args`` on ``url``, with the measured servers' environment (:func:`django_env`) and
    ``extra_env`` added: nothing of it is left in this process's environment."""
    proc = subprocess.run(
        [PY, "manage.py", *args],
        cwd=ROOT,
        env=django_env(url, **(extra_env or {})),
        capture_output=True,
        text=True,
        check=False,
    )
    if not quiet:
        for line in without_runtime_dir_warning(proc.stdout + proc.stderr):
            print("    " + line, flush=True)
    if check and proc.returncode != 0:
        raise SystemExit(f"manage.py {' '.join(args)} failed with exit code {proc.returncode}")
    return proc


def ctl(url: str, *args: str) -> str:
    """``python -m devtools.djangoctl ...`` (bulk helpers that need Django) in a child process."""
    proc = subprocess.run(
        [PY, "-m", "devtools.djangoctl", *args], cwd=ROOT, env=django_env(url), capture_output=True, text=True
    )
    if proc.returncode != 0:
        print(proc.stdout + proc.stderr, flush=True)
        raise SystemExit(f"devtools.djangoctl {' '.join(args)} failed")
    return proc.stdout


def flash_sale_setup(url: str, stock: int, *window: str) -> int:
    """``manage.py flash_sale_setup --stock N`` (plus sale window options, e.g. ``--starts-in 10``); returns the
    highest order id right after it."""
    proc = manage(url, "flash_sale_setup", "--stock", str(stock), *window)
    for token in proc.stdout.split():
        if token.startswith("max_order_id="):
            return int(token.split("=", 1)[1])
    raise SystemExit("flash_sale_setup printed no max_order_id")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (the one helper for every local server)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Gunicorn:
    """One gunicorn master on 127.0.0.1:<free port>; ``stop()`` ends exactly the process it started."""

    def __init__(
        self,
        url: str,
        *,
        workers: int = 5,
        worker_class: str | None = None,
        threads: int | None = None,
        conn_max_age: int = 60,
        config: str | None = None,
        extra_env: dict[str, Any] | None = None,
        app: str = "config.wsgi:application",
    ) -> None:
        self.port = free_port()
        self.app = app  # the WSGI application (bench.floor_wsgi serves the benchmark's framework floor)
        self.base = f"http://127.0.0.1:{self.port}"
        self.config = config or "config/gunicorn.conf.py"
        # The worker class is a constant of config/gunicorn.conf.py (its threads: WEB_THREADS); another kind of worker
        # (a benchmark's variant, a test's control) is given on gunicorn's command line, which wins over the file.
        self.worker_class, self.threads = worker_class, threads
        self.settings: dict[str, Any] = {"WEB_CONCURRENCY": workers, "DB_CONN_MAX_AGE": conn_max_age}
        self.env = django_env(
            url,
            HOST="127.0.0.1",
            PORT=self.port,
            # As `make run` serves: Django's INFO logging, i.e. one JSON access line per request (its cost is
            # part of what is measured); management commands run by the bench stay at WARNING.
            LOG_LEVEL="INFO",
            **self.settings,
            **(extra_env or {}),
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[str] | None = None
        self.log_path = RESULTS / f"gunicorn-{self.port}.log"

    def describe(self) -> str:
        s = self.settings
        kind = self.worker_class or "gthread"
        threads = self.threads or int(self.env.get("WEB_THREADS", 4))
        kind += f" x{threads} threads" if kind == "gthread" else ""
        app = "" if self.app == "config.wsgi:application" else f", app {self.app}"
        return (
            f"{s['WEB_CONCURRENCY']} {kind} workers, DB_CONN_MAX_AGE={s['DB_CONN_MAX_AGE']}, config {self.config}{app}"
        )

    def start(self, timeout: float = 30) -> Self:
        RESULTS.mkdir(exist_ok=True)
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                # beside the running Python (this checkout's venv, also for a scratch copy of the tree that has none)
                str(Path(PY).with_name("gunicorn")),
                "-c",
                self.config,
                *([f"--worker-class={self.worker_class}"] if self.worker_class else []),
                *([f"--threads={self.threads}"] if self.threads else []),
                self.app,
            ],
            cwd=ROOT,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"gunicorn exited early; see {self.log_path}")
            with (
                contextlib.suppress(OSError, urllib.error.URLError),
                urllib.request.urlopen(self.base + "/readyz", timeout=2) as resp,
            ):
                if resp.status == 200 and len(self.worker_pids()) >= int(self.settings["WEB_CONCURRENCY"]):
                    return self
            time.sleep(0.2)
        self.stop()
        raise SystemExit(f"gunicorn did not become ready in {timeout}s; see {self.log_path}")

    def worker_pids(self) -> list[int]:
        import psutil

        if self.proc is None:
            return []
        try:
            return [child.pid for child in psutil.Process(self.proc.pid).children()]
        except psutil.NoSuchProcess:
            return []

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def errors_in_log(self) -> list[str]:
        """Tracebacks and ERROR lines the workers logged (a 5xx leaves one)."""
        try:
            text = self.log_path.read_text()
        except OSError:
            return []
        return [
            line for line in text.splitlines() if "Traceback" in line or " ERROR " in line or '"level": "ERROR"' in line
        ]

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str))


def parse_qs_host(url: str) -> dict[str, str]:
    """The Unix-socket directory (or host) and database name of a postgres URL, for pgbench/psql."""
    parts = urlparse(url)
    query = parse_qs(parts.query)
    host = query.get("host", [parts.hostname or "127.0.0.1"])[0]
    return {
        "host": host,
        "port": str(parts.port or 5432),
        "user": parts.username or "postgres",
        "dbname": parts.path.lstrip("/"),
    }


# --- the rehearsals' stack: web instances, sweepers, their metrics ---------------------------------------------


def scrape(url: str) -> dict[str, float]:
    """A Prometheus text page as {sample name with labels: value}."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, number = line.rpartition(" ")
            samples[name] = float(number)
    return samples


def wait_for_metrics(ports: list[int], *, seconds: float = 30) -> None:
    """Until every sweeper's metrics endpoint on 127.0.0.1 answers (it is up once its worker has started)."""
    deadline = time.monotonic() + seconds
    for port in ports:
        while True:
            try:
                scrape(f"http://127.0.0.1:{port}/metrics")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("a sweeper's metrics endpoint never came up") from None
                time.sleep(0.2)  # polling with a deadline


def wait_for(predicate: Callable[[], object], timeout: float) -> float | None:
    """Seconds until ``predicate()`` was true (polled every 0.1 s), or None at the deadline. An exception counts as
    not yet (a node still starting answers with errors)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            if predicate():
                return time.monotonic() - started
        except Exception:  # noqa: S110 - a server still starting answers with errors; keep polling
            pass
        time.sleep(0.1)
    return None


def query(url: str, sql: str) -> list[tuple[Any, ...]]:
    """Rows of one statement on a connection of its own."""
    import psycopg

    with psycopg.connect(url.replace("postgres://", "postgresql://", 1)) as conn:
        return conn.execute(sql).fetchall()


class Sweepers:
    """``count`` sweepers (``manage.py expire_reservations --loop``, every 1 s, batches of 20), each with a metrics
    port on 127.0.0.1 and its log in bench-results/<name>-sweeper-N.log; ``stop()`` ends exactly those processes."""

    def __init__(self, url: str, count: int, *, name: str, **env: Any) -> None:
        self.env = django_env(url, LOG_LEVEL="WARNING", **env)
        self.count, self.name = count, name
        self.running: list[tuple[subprocess.Popen[bytes], Any, int]] = []

    def start(self) -> Self:
        for n in range(self.count):
            port = free_port()
            out = open(RESULTS / f"{self.name}-sweeper-{n}.log", "w")  # noqa: SIM115 - closed in stop()
            argv = [PY, "manage.py", "expire_reservations", "--loop", "--interval", "1", "--batch-size", "20"]
            proc = subprocess.Popen(
                [*argv, "--metrics-port", str(port)], cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )
            self.running.append((proc, out, port))
        wait_for_metrics(self.ports)
        return self

    @property
    def ports(self) -> list[int]:
        return [port for _proc, _out, port in self.running]

    def describe(self) -> str:
        return ", ".join(f"pid {proc.pid} metrics :{port}" for proc, _out, port in self.running)

    def metrics(self) -> list[dict[str, float]]:
        return [scrape(f"http://127.0.0.1:{port}/metrics") for port in self.ports]

    def stop(self) -> None:
        for proc, out, _port in self.running:
            if proc.poll() is None:
                proc.terminate()  # SIGTERM: the loop finishes its batch and exits
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            out.close()
        self.running = []


class Stack:
    """The application side of a rehearsal: ``instances`` gunicorns (``workers`` workers each, ``env`` added to
    their settings) and ``sweepers`` sweepers, all on ``url``. ``stop()`` ends the sweepers, then the instances (last
    started first), each by its pid, and returns the error lines the instances logged, but those containing one of
    ``expected`` (a 503 is an answer the rehearsal expects)."""

    def __init__(
        self,
        url: str,
        *,
        name: str,
        workers: int,
        env: dict[str, Any],
        sweeper_env: dict[str, Any] | None = None,
        instances: int = 2,
        sweepers: int = 2,
    ) -> None:
        self.url, self.name, self.workers, self.env, self.count = url, name, workers, env, instances
        self.instances: list[Gunicorn] = []
        self.sweepers = Sweepers(url, sweepers, name=name, **(sweeper_env or {}))

    def start_instances(self, on_start: Callable[[Gunicorn], None] = lambda instance: None) -> Self:
        for _ in range(self.count):
            instance = Gunicorn(self.url, workers=self.workers, extra_env=self.env)
            self.instances.append(instance)  # before start(): a failed start is stopped too
            instance.start()
            on_start(instance)
        return self

    def start_sweepers(self) -> Self:
        self.sweepers.start()
        return self

    @property
    def bases(self) -> list[str]:
        return [instance.base for instance in self.instances]

    def instance_metrics(self) -> list[dict[str, float]]:
        return [scrape(f"{base}/metrics") for base in self.bases]

    def stop(self, *, expected: tuple[str, ...]) -> list[str]:
        self.sweepers.stop()
        logged: list[str] = []
        for instance in reversed(self.instances):
            logged += [line for line in instance.errors_in_log() if not any(e in line for e in expected)]
            instance.stop()
        return logged


def http_call(
    base: str, path: str, *, body: bytes | None, headers: dict[str, str], timeout: float
) -> tuple[int, bytes, Message]:
    """One JSON request to a local instance (POST when there is a body): (status, body, response headers). An HTTP
    error status is an answer, not an exception; a connection failure raises."""
    request = urllib.request.Request(base + path, data=body, method="POST" if body is not None else "GET")
    for key, value in {"Content-Type": "application/json", **headers}.items():
        request.add_header(key, value)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read(), response.headers
    except urllib.error.HTTPError as error:
        return error.code, error.read(), error.headers


def payment_webhook(order: dict[str, Any], *, event_id: str, reference: str) -> tuple[bytes, dict[str, str]]:
    """The gateway's ``payment.succeeded`` event paying ``order`` (a checkout's answer) in full, with the provider's
    ``reference``, and its headers (the ``X-Signature`` the webhook checks, with the bench's published secret)."""
    from payments import signing

    event = {
        "event_id": event_id,
        "type": "payment.succeeded",
        "order_id": order["order_id"],
        "amount": order["total"],
        "currency": order["currency"],  # the order's own (every event carries one)
        "provider_reference": reference,
    }
    body = json.dumps(event).encode()
    return body, {"X-Signature": signing.sign(body=body, secret=BENCH_SECRET)}
