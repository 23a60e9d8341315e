"""HAProxy in front of the gunicorn instances, for ``make scaleout``, ``make deploy-rehearsal``, ``make loadtest`` and
the tests (Debian's ``haproxy`` 2.6, installed by ``make haproxy-deps``). The configuration is production's own,
``deploy/haproxy/haproxy.cfg.template``: :func:`render_config` fills in its placeholders (addresses, ports, limits)
and nothing else, and ``python -m devtools.haproxy`` renders it for a production host.

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

:func:`render_config` reads only the template (``skincare/tests/test_rehearsal_config.py`` checks what it
promises); the process is started on a free port on 127.0.0.1 and stopped by its pid.
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from types import TracebackType

from devtools.processes import ROOT, free_port

TEMPLATE = ROOT / "deploy" / "haproxy" / "haproxy.cfg.template"
ERRORFILE_503 = ROOT / "deploy" / "haproxy" / "503.http"
BACKEND = "web"
# The bound: a request that cannot start on a worker within this long after it reached the front is answered 503 with
# Retry-After (the errorfile) instead of waiting on (docs/runbooks/overload.md#a-fast-503-never-a-time-out).
QUEUE_TIMEOUT_MS = 2000
MAX_CLIENTS = 4000
# One line per request: what ``bench.loadtest`` reads for the front's own answers (%tsc: the termination state, "sQ"
# when the queue timeout answered; %Tw: ms queued; %Ta: ms from the request to the end of its answer).
LOG_FORMAT = '{"status":%ST,"tsc":"%tsc","tw":%Tw,"ta":%Ta,"method":"%HM","path":"%HPO"}'


def binary() -> str | None:
    """The haproxy executable (Debian installs it in /usr/sbin, not always on PATH)."""
    return shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)


def render_config(
    *,
    servers: Mapping[str, int | str],
    admin_socket: Path | str,
    maxconn: int,
    port: int | None = None,
    binds: Sequence[str] = (),
    queue_timeout_ms: int = QUEUE_TIMEOUT_MS,
    server_timeout_ms: int = 30_000,
    errorfile: Path | str = ERRORFILE_503,
    max_clients: int = MAX_CLIENTS,
    log_requests: bool = False,
    template: Path = TEMPLATE,
) -> str:
    """The whole haproxy.cfg: ``template`` (production's) with its placeholders filled in. The frontend listens on
    127.0.0.1:``port`` and/or each of ``binds`` (a ``bind`` line's arguments, e.g. ``:443 ssl crt /etc/haproxy/shop.pem``);
    the backend is ``servers``: name → a port on 127.0.0.1, or ``host:port``. A placeholder left unfilled is an
    error (``KeyError``), never an empty value."""
    bind_lines = ([f"127.0.0.1:{port}"] if port is not None else []) + list(binds)
    if not bind_lines or not servers:
        raise ValueError("the front needs at least one bind address and one server")
    values = {
        "max_clients": max_clients,
        "admin_socket": admin_socket,
        "global_log": "    log stdout format raw local0" if log_requests else "",
        "defaults_log": f"    log global\n    log-format '{LOG_FORMAT}'" if log_requests else "    option httplog",
        "server_timeout_ms": server_timeout_ms,
        "queue_timeout_ms": queue_timeout_ms,
        "errorfile": errorfile,
        "binds": "\n".join(f"    bind {line}" for line in bind_lines),
        "maxconn": maxconn,
        "servers": "\n".join(
            f"    server {name} {f'127.0.0.1:{where}' if isinstance(where, int) else where} check"
            for name, where in servers.items()
        ),
    }
    return Template(template.read_text()).substitute(values)


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


def main(argv: Sequence[str] | None = None) -> None:
    """Print production's haproxy.cfg for the given addresses (the same template every rehearsal runs)."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m devtools.haproxy", description="Render deploy/haproxy/haproxy.cfg.template for a host."
    )
    parser.add_argument("--bind", action="append", required=True, help="a bind line's arguments (repeatable)")
    parser.add_argument("--server", action="append", required=True, help="NAME=HOST:PORT of a gunicorn instance")
    parser.add_argument(
        "--maxconn", type=int, required=True, help="requests at once per instance: WEB_CONCURRENCY x WEB_THREADS"
    )
    parser.add_argument("--admin-socket", default="/run/haproxy/admin.sock")
    parser.add_argument("--errorfile", default="/etc/haproxy/errors/503.http", help="where deploy/haproxy/503.http is")
    parser.add_argument("--max-clients", type=int, default=MAX_CLIENTS)
    args = parser.parse_args(argv)
    servers = dict(item.split("=", 1) for item in args.server if "=" in item)
    if len(servers) != len(args.server):
        parser.error("--server takes NAME=HOST:PORT")
    print(
        render_config(
            binds=args.bind,
            servers=servers,
            admin_socket=args.admin_socket,
            maxconn=args.maxconn,
            errorfile=args.errorfile,
            max_clients=args.max_clients,
        ),
        end="",
    )


if __name__ == "__main__":
    main()
