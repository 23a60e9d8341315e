"""HAProxy in front of the gunicorn instances, for ``make scaleout``, ``make deploy-rehearsal``, ``make loadtest`` and
the tests (Debian's ``haproxy`` 2.6, installed by ``make haproxy-deps``). The configuration is production's own,
``deploy/haproxy/haproxy.cfg.template``, rendered by production's own ``deploy.haproxy.render.render_config`` (its
placeholders filled in, nothing else), which is what ``python -m deploy.haproxy.render`` prints for a host.

- the client's address and scheme: the front removes any ``X-Forwarded-For``, ``X-Forwarded-Proto`` (and the
  other forwarding headers) a client sent, then appends the connection's own address (``option forwardfor``) and
  sets ``X-Forwarded-Proto`` to ``https`` or ``http`` by the connection's TLS
  (``skincare/tests/test_front_owns_the_client_address.py``);
- health: ``GET /readyz`` every 500 ms; two failures take an instance out, one success puts it back;
- each instance gets at most ``maxconn`` requests at a time (its workers' threads); the rest wait in HAProxy's queue,
  at most ``timeout queue`` (:data:`QUEUE_TIMEOUT_MS`, the bound a request must start within), then the buyer gets
  ``deploy/haproxy/503.http`` (503, ``Retry-After: 2``, ``X-Shed-By: front``, the API's error shape) instead of
  waiting on: under overload every request is answered, fast, and one that was shed never reached the application;
- at most ``max_clients`` client connections at once (global and frontend ``maxconn``; each costs HAProxy two file
  descriptors, checked against this process's limit before the start);
- with ``log_path``, one JSON line per request (status, time queued, total time, termination state) in that file;
- a connection an instance refuses is retried on another one (``retries``, ``option redispatch``);
- the runtime API (a Unix socket, ``level admin``) drains an instance (``set server web/NAME state drain``: no new
  requests, the ones in flight finish) and puts it back (``state ready``): :meth:`HAProxy.drain`, :meth:`ready`.

``render_config`` reads only the template (``skincare/tests/test_rehearsal_config.py`` checks what it promises);
the process is started on a free port on 127.0.0.1 and stopped by its pid.
"""

from __future__ import annotations

import csv
import resource
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from deploy.haproxy.render import MAX_CLIENTS, QUEUE_TIMEOUT_MS, render_config
from devtools.processes import free_port

BACKEND = "web"


def binary() -> str | None:
    """The haproxy executable (Debian installs it in /usr/sbin, not always on PATH)."""
    return shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)


def parse_stat(text: str) -> dict[str, dict[str, str]]:
    """``show stat`` (CSV) as {server name: its row} for the backend's servers."""
    rows = csv.DictReader(text.lstrip("# ").splitlines())
    return {row["svname"]: row for row in rows if row["pxname"] == BACKEND and row["svname"] not in ("BACKEND",)}


@dataclass
class HAProxy:
    servers: dict[str, int]
    maxconn: int
    queue_timeout_ms: int = QUEUE_TIMEOUT_MS
    max_clients: int = MAX_CLIENTS
    log_path: Path | None = None
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="skincare-haproxy-")))

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def admin_socket(self) -> Path:
        return self.workdir / "admin.sock"

    def start(self, *, timeout: float = 30) -> HAProxy:
        exe = binary()
        if exe is None:
            raise SystemExit("haproxy is not installed (as root: make haproxy-deps, or apt-get install haproxy)")
        config = self.workdir / "haproxy.cfg"
        config.write_text(self.render())
        needed, (_soft, hard) = 2 * self.max_clients + 100, resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard != resource.RLIM_INFINITY and needed > hard:
            raise SystemExit(
                f"haproxy needs about {needed} file descriptors for {self.max_clients} clients; the limit is {hard}"
            )
        check = subprocess.run([exe, "-c", "-q", "-f", str(config)], capture_output=True, text=True)
        if check.returncode != 0:
            raise SystemExit(f"haproxy refused its configuration:\n{check.stdout}{check.stderr}")
        log_path = self.log_path or self.workdir / "haproxy.log"
        with open(log_path, "w") as log:  # the process keeps its own descriptor
            self.proc = subprocess.Popen([exe, "-db", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"haproxy exited early; see {log_path}")
            try:
                if all(row["status"] == "UP" for row in self.stat().values()):
                    return self
            except OSError:
                pass  # the admin socket is not there yet
            time.sleep(0.1)
        self.stop()
        raise SystemExit(f"haproxy did not see every instance UP within {timeout}s")

    def render(self) -> str:
        """This front's haproxy.cfg (production's template, :func:`render_config`)."""
        return render_config(
            port=self.port,
            servers=self.servers,
            admin_socket=self.admin_socket,
            maxconn=self.maxconn,
            queue_timeout_ms=self.queue_timeout_ms,
            max_clients=self.max_clients,
            log_requests=self.log_path is not None,
        )

    def command(self, line: str) -> str:
        """One runtime API command; its answer."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(str(self.admin_socket))
            s.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def stat(self) -> dict[str, dict[str, str]]:
        return parse_stat(self.command("show stat"))

    def set_state(self, name: str, state: str) -> None:
        answer = self.command(f"set server {BACKEND}/{name} state {state}").strip()
        if answer:
            raise SystemExit(f"haproxy refused 'state {state}' for {name}: {answer}")

    def drain(self, name: str, *, timeout: float = 30) -> float:
        """No new requests to ``name``; returns once the ones in flight finished (seconds it took)."""
        started = time.monotonic()
        self.set_state(name, "drain")
        while int(self.stat()[name]["scur"] or 0) > 0:
            if time.monotonic() - started > timeout:
                raise SystemExit(f"{name} still had requests in flight {timeout}s after the drain")
            time.sleep(0.05)
        return time.monotonic() - started

    def ready(self, name: str, *, timeout: float = 30) -> float:
        """``name`` back in rotation; returns once HAProxy's health check sees it UP (seconds it took)."""
        started = time.monotonic()
        self.set_state(name, "ready")
        while self.stat()[name]["status"] != "UP":
            if time.monotonic() - started > timeout:
                raise SystemExit(f"{name} not UP {timeout}s after it was put back")
            time.sleep(0.05)
        return time.monotonic() - started

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR1)  # soft stop: the requests in flight finish
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> HAProxy:
        return self.start()

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()
