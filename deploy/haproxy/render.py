"""Production's front configuration, rendered: ``haproxy.cfg.template`` beside this file with its placeholders
(addresses, ports, limits) filled in and nothing else. Production renders it on the HAProxy host with
``python -m deploy.haproxy.render`` (standard library only: it needs this directory and Python, not the shop's
packages); every rehearsal, ``make loadtest`` and the tests render the same template through
``devtools.haproxy``, which imports :func:`render_config` from here."""

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from string import Template

HERE = Path(__file__).resolve().parent
TEMPLATE = HERE / "haproxy.cfg.template"
ERRORFILE_503 = HERE / "503.http"
# The bound: a request that cannot start on a worker within this long after it reached the front is answered 503 with
# Retry-After (the errorfile) instead of waiting on (docs/runbooks/overload.md#a-fast-503-never-a-time-out).
QUEUE_TIMEOUT_MS = 2000
MAX_CLIENTS = 4000
# One line per request: what ``bench.loadtest`` reads for the front's own answers (%tsc: the termination state, "sQ"
# when the queue timeout answered; %Tw: ms queued; %Ta: ms from the request to the end of its answer).
LOG_FORMAT = '{"status":%ST,"tsc":"%tsc","tw":%Tw,"ta":%Ta,"method":"%HM","path":"%HPO"}'


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


def main(argv: Sequence[str] | None = None) -> None:
    """Print production's haproxy.cfg for the given addresses (the same template every rehearsal runs)."""
    parser = argparse.ArgumentParser(
        prog="python -m deploy.haproxy.render", description="Render deploy/haproxy/haproxy.cfg.template for a host."
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
