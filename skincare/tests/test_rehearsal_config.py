"""The pure parts of the rehearsals that change or restore a running shop: HAProxy's and pgBackRest's rendered
configuration, the deploy rehearsal's scratch migration (the migration guard accepts it), and the restore proof on
fabricated histories (each kind of wrong restore is reported). ``make deploy-rehearsal`` and
``make restore-rehearsal`` run them for real; they are not part of ``make test``."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection
from django.db.migrations.loader import MigrationLoader

from deploy.haproxy import render
from devtools import haproxy, pgbackrest
from devtools.deploy_rehearsal import SCRATCH, orders_leaf, scratch_migrations
from devtools.failover_proof import Call, Snapshot
from devtools.migration_guard import check_statements, migration_sql
from devtools.processes import ROOT
from devtools.restore_proof import after_problems, split_at
from devtools.restore_rehearsal import unarchived_bytes


def render_haproxy(tmp_path: Path) -> str:
    return render.render_config(
        port=8080,
        servers={"web0": 9000, "web1": 9001},
        admin_socket=tmp_path / "admin.sock",
        maxconn=2,
        queue_timeout_ms=3000,
    )


def test_haproxy_checks_readyz_bounds_the_queue_and_answers_503_with_retry_after(tmp_path):
    config = render_haproxy(tmp_path)
    assert "http-check send meth GET uri /readyz" in config
    assert "http-check expect status 200" in config
    assert "timeout queue 3000ms" in config
    assert "maxconn 2" in config.split("default-server", 1)[1].splitlines()[0]
    assert "server web0 127.0.0.1:9000 check" in config and "server web1 127.0.0.1:9001 check" in config
    assert f"stats socket {tmp_path / 'admin.sock'} mode 600 level admin" in config
    errorfile = render.ERRORFILE_503.read_bytes()
    assert f"errorfile 503 {render.ERRORFILE_503}" in config
    head, _, body = errorfile.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 ") and b"\r\nRetry-After: 2" in head
    assert b"\r\nX-Shed-By: front" in head  # tells the front's 503 from the application's own
    assert b'"code": "busy"' in body


def test_haproxy_holds_every_client_of_a_crowd_and_logs_each_request_when_asked(tmp_path):
    config = render.render_config(
        port=8080, servers={"web0": 9000}, admin_socket=tmp_path / "a.sock", maxconn=3, max_clients=6000
    )
    global_section, frontend = config.split("defaults", 1)[0], config.split("frontend shop", 1)[1].split("backend")[0]
    assert "maxconn 6000" in global_section and "maxconn 6000" in frontend
    assert f"timeout queue {render.QUEUE_TIMEOUT_MS}ms" in config  # the bound, stated once
    assert "log-format" not in config
    logged = render.render_config(
        port=8080, servers={"web0": 9000}, admin_socket=tmp_path / "a.sock", maxconn=3, log_requests=True
    )
    assert "log stdout format raw" in logged and f"log-format '{render.LOG_FORMAT}'" in logged


@pytest.mark.haproxy
@pytest.mark.parametrize("log_requests", [False, True])
def test_haproxy_accepts_the_rendered_configuration(tmp_path, log_requests):
    config = render.render_config(
        port=8080,
        servers={"web0": 9000, "web1": 9001},
        admin_socket=tmp_path / "admin.sock",
        maxconn=2,
        log_requests=log_requests,
    )
    (tmp_path / "haproxy.cfg").write_text(config)
    checked = subprocess.run(  # noqa: S603 - the installed haproxy on a file this test wrote
        [haproxy.binary(), "-c", "-f", str(tmp_path / "haproxy.cfg")], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def fixed_lines(template: str) -> list[str]:
    return [line for line in template.splitlines() if "$" not in line]


def test_the_rehearsals_and_production_run_the_one_shipped_front(tmp_path):
    """deploy/haproxy/render.py fills in the placeholders of deploy/haproxy/haproxy.cfg.template and nothing else:
    every other line of the template is in the rendered configuration, in order, for a rehearsal (through
    devtools/haproxy.py) and for production, whose host runs ``python -m deploy.haproxy.render`` with nothing of the
    shop but the ``deploy`` directory."""
    template = render.TEMPLATE.read_text()
    assert "http-request del-header X-Forwarded-For" in template and "option forwardfor" in template
    rehearsal = render_haproxy(tmp_path / "rehearsal")
    host = tmp_path / "host"
    shutil.copytree(ROOT / "deploy", host / "deploy")
    rendered = subprocess.run(
        [sys.executable, "-m", "deploy.haproxy.render", "--bind", ":443 ssl crt /etc/haproxy/shop.pem",
         "--bind", ":80", "--server", "web0=10.0.3.11:8000", "--server", "web1=10.0.3.12:8000", "--maxconn", "4"],
        cwd=host, capture_output=True, text=True, check=False, env={"PATH": os.environ.get("PATH", "")},
    )  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    production = rendered.stdout
    for config in (rehearsal, production):
        lines = iter(config.splitlines())
        assert all(any(line == rendered for rendered in lines) for line in fixed_lines(template))
        assert "$" not in config
    assert "    bind :443 ssl crt /etc/haproxy/shop.pem\n    bind :80\n" in production
    assert "    server web0 10.0.3.11:8000 check\n    server web1 10.0.3.12:8000 check" in production


def test_a_placeholder_left_unfilled_is_an_error(tmp_path):
    template = tmp_path / "haproxy.cfg.template"
    template.write_text(render.TEMPLATE.read_text() + "    timeout tunnel ${tunnel_timeout}\n")
    with pytest.raises(KeyError, match="tunnel_timeout"):
        render.render_config(servers={"web0": 9000}, port=8080, admin_socket="a.sock", maxconn=1, template=template)


def test_haproxy_show_stat_is_read_per_server():
    text = "# pxname,svname,scur,status,\nshop,FRONTEND,3,OPEN,\nweb,web0,1,UP,\nweb,web1,0,DRAIN,\nweb,BACKEND,1,UP,\n"
    assert {name: (row["scur"], row["status"]) for name, row in haproxy.parse_stat(text).items()} == {
        "web0": ("1", "UP"),
        "web1": ("0", "DRAIN"),
    }


def test_pgbackrest_archives_every_segment_within_the_archive_timeout(tmp_path):
    settings = pgbackrest.server_settings(port=5555, socket_dir=tmp_path, config=tmp_path / "p.conf", archive=True)
    assert settings["archive_mode"] == "on"
    assert settings["archive_command"] == f"'pgbackrest --config={tmp_path / 'p.conf'} --stanza=shop archive-push %p'"
    assert settings["archive_timeout"] == f"{pgbackrest.ARCHIVE_TIMEOUT_SECONDS}s"
    copy = pgbackrest.server_settings(port=5556, socket_dir=tmp_path, config=tmp_path / "p.conf", archive=False)
    assert copy["archive_mode"] == "off" and "archive_command" not in copy  # a restored copy never pushes WAL
    assert copy["synchronous_standby_names"] == "''"  # nor waits for a standby of the cluster it came from
    conf = pgbackrest.render_config(
        repo=tmp_path / "repo", logs=tmp_path / "log", hosts=[(tmp_path / "pg", 5555, tmp_path)]
    )
    assert "[shop]" in conf and f"pg1-path={tmp_path / 'pg'}" in conf and "pg1-port=5555" in conf
    assert f"repo1-path={tmp_path / 'repo'}" in conf


def test_pgbackrest_names_every_node_of_a_cluster_and_each_node_pushes_its_own_wal(tmp_path):
    nodes = [(tmp_path / "n0", 5001, tmp_path / "s0"), (tmp_path / "n1", 5002, tmp_path / "s1")]
    conf = pgbackrest.render_config(repo=tmp_path / "repo", logs=tmp_path / "log", hosts=nodes)
    assert (
        f"pg1-path={tmp_path / 'n0'}" in conf
        and "pg2-port=5002" in conf
        and f"pg2-socket-path={tmp_path / 's1'}" in conf
    )
    command = pgbackrest.archive_command(tmp_path / "p.conf", pgdata="/data/node1")
    assert command == f"pgbackrest --config={tmp_path / 'p.conf'} --stanza=shop --pg1-path=/data/node1 archive-push %p"


@pytest.mark.django_db(transaction=True)  # the concurrent index build refuses to run inside a test transaction
def test_the_deploy_rehearsals_migration_passes_the_guard(tmp_path):
    sources = scratch_migrations(orders_leaf())
    loader = MigrationLoader(connection)
    previous = ("orders", orders_leaf())
    for name in SCRATCH:
        namespace: dict[str, object] = {}
        exec(compile(sources[name], name, "exec"), namespace)  # noqa: S102 - the rehearsal's own generated source
        migration = namespace["Migration"](name, "orders")
        sql = migration_sql(connection, loader, previous, migration)
        assert check_statements(sql) == [], sql
        assert any("rehearsal_note" in statement for statement in sql)
        loader.graph.add_node(("orders", name), migration)
        loader.graph.add_dependency(migration, ("orders", name), previous)
        previous = ("orders", name)


def checkout(order_id, key, *, started, ended):
    return Call("checkout", 201, {"order_id": order_id}, started, ended, customer="c", key=key, items=[(1, 1)])


def snapshot(orders, keys, events=()):
    return Snapshot(
        orders=dict.fromkeys(orders, "pending_payment"),
        lines={},
        reservations={},
        events=dict.fromkeys(events, (None, "paid")),
        keys={("c", k): o for k, o in keys.items()},
        expire_ledger={},
        overdue_pending=0,
    )


def test_the_restore_proof_splits_at_the_target():
    calls = [
        checkout(1, "a", started=1, ended=2),
        checkout(2, "b", started=4, ended=6),
        checkout(3, "c", started=7, ended=8),
    ]
    split = split_at(calls, 5.0)
    assert [c.key for c in split.before] == ["a"]
    assert [c.key for c in split.in_flight] == ["b"]
    assert [c.key for c in split.after] == ["c"]


def test_the_restore_proof_passes_a_copy_without_anything_from_after_the_target():
    after = [checkout(3, "c", started=7, ended=8), Call("webhook", 200, {}, 7, 8, order_id=1, event_id="evt-c")]
    assert after_problems(after, snapshot([1, 2], {"a": 1, "b": 2})) == []


@pytest.mark.parametrize(
    "copy",
    [
        snapshot([1, 3], {"a": 1}),  # the order created after the target is there
        snapshot([1], {"a": 1, "c": 3}),  # its idempotency key is there
        snapshot([1], {"a": 1}, events=["evt-c"]),  # a payment applied after the target is there
    ],
)
def test_control_the_restore_proof_reports_what_came_after_the_target(copy):
    after = [checkout(3, "c", started=7, ended=8), Call("webhook", 200, {}, 7, 8, order_id=1, event_id="evt-c")]
    assert after_problems(after, copy)


def test_the_archive_lag_counts_the_wal_after_the_last_archived_segment():
    segment = 16 * 1024 * 1024
    # segment 3 of log 0 archived: it ends at 4 * 16 MiB; the server is 100 bytes further
    assert unarchived_bytes("000000010000000000000003", f"0/{4 * segment + 100:X}") == 100
    assert unarchived_bytes("000000010000000000000003", f"0/{4 * segment - 5:X}") == 0  # still in the archived one
    assert unarchived_bytes("000000010000000100000000", f"1/{segment + 7:X}") == 7  # across the 4 GiB boundary
    # a backup label names the segment the backup started in, not the last one archived: no figure from it
    assert unarchived_bytes("000000010000000000000003.00000028.backup", f"0/{3 * segment + 10:X}") is None
    assert unarchived_bytes("00000002.history", "0/3000000") is None
    assert unarchived_bytes(None, "0/3000000") == 0x3000000  # nothing archived yet: everything is at risk
