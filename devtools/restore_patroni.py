"""``make restore-rehearsal``, second part: the same mistake and restore on the Patroni cluster of ``make failover``,
with a failover in between.

etcd + two Patroni nodes (:mod:`devtools.patroni`; PostgreSQL 15 binaries, the newest pgBackRest 2.45 supports), both
archiving into one pgBackRest stanza that names both nodes (each node's ``archive_command`` names its own data
directory; whichever is the leader archives). A full backup from the leader; one gunicorn and one sweeper on the
multi-host DSN; the sale (:mod:`devtools.shop_load`).

1. --before seconds of sale; then the leader's host is lost (SIGKILL of its Patroni and its postmaster); the
   standby is promoted (a new timeline) and must archive segments of its timeline; ``pgbackrest check`` passes on it
   and an incremental backup is taken from it (what closes a gap a lost leader can leave in the archive: a segment
   it had not pushed yet); the sale goes on for --after-failover seconds on it.
2. The mistake at T on the new leader (``TRUNCATE orders CASCADE``); --after seconds more; the WAL switched and
   archived.
3. A copy restored to T - 1 s from the full backup taken on the old leader (``--set``), replaying the archive
   across the timeline switch; the proof of :mod:`devtools.restore_rehearsal` (answered before the target: there; sent after it: absent;
   the sweeper and new checkouts resume on the copy; ``audit_inventory`` clean).

Every process is stopped by its pid; data in ``.data/restore`` (git-ignored), recreated every run.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time

from devtools import pgbackrest
from devtools.patroni import Cluster
from devtools.pgbackrest import PG_BIN, Repository
from devtools.processes import RESULTS, log
from devtools.restore_rehearsal import (
    BASE,
    DBNAME,
    Rehearsal,
    parse_args,
    prepare_database,
    prove,
    report,
    restore,
    sale_and_mistake,
)
from devtools.shop_load import wait_until


def timeline_archived(cluster: Cluster) -> bool:
    """Whether the current leader has archived a segment of its own timeline."""
    leader = cluster.leader()
    if leader is None:
        return False
    rows = Cluster.sql(leader, "SELECT last_archived_wal FROM pg_stat_archiver")
    wal = str(rows[0][0] or "")
    return wal[:8] == f"{cluster.timeline(leader) or 0:08X}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    r = Rehearsal(args)
    if missing := pgbackrest.binaries_missing():
        raise SystemExit(f"make restore-rehearsal needs {', '.join(missing)} (as root: make pgbackrest-deps)")
    RESULTS.mkdir(exist_ok=True)
    shutil.rmtree(BASE, ignore_errors=True)
    BASE.mkdir(parents=True)
    config = BASE / "backup" / "pgbackrest.conf"
    cluster = Cluster(
        BASE / "cluster",
        bin_dir=str(PG_BIN),
        archive_command=pgbackrest.archive_command(config, pgdata="{data_dir}"),
        archive_timeout=pgbackrest.ARCHIVE_TIMEOUT_SECONDS,
    )
    repo = Repository(BASE / "backup", [(n.data_dir, n.pg_port, n.dir) for n in cluster.nodes])
    repo.write_config()
    pgbackrest.give_to_postgres(BASE / "backup")

    def primary(dbname: str) -> str:
        leader = cluster.leader()
        if leader is None:
            raise SystemExit("no leader")
        return leader.conninfo(dbname)

    def failover() -> None:
        victim = cluster.leader()
        assert victim is not None
        survivor = next(n for n in cluster.nodes if n is not victim)
        before = cluster.timeline(victim)
        cluster.kill_host(victim)
        killed = time.monotonic()
        log(f"KILL: the leader {victim.name}'s host (Patroni and postmaster SIGKILLed)")
        if not wait_until(lambda: Cluster.sql(survivor, "SELECT NOT pg_is_in_recovery()")[0][0] is True, 60):
            r.failures.append(f"{survivor.name} was not promoted within 60s")
            return
        r.facts["promoted_after_kill_seconds"] = round(time.monotonic() - killed, 1)
        archived = wait_until(lambda: timeline_archived(cluster), 60)
        r.facts["new_leader_archived_its_timeline_after_kill_seconds"] = round(time.monotonic() - killed, 1)
        r.facts["timeline"] = f"{before} -> {cluster.timeline(survivor)}"
        if not archived:
            r.failures.append(f"{survivor.name} archived no segment of its timeline within 60s of its promotion")
        log(f"{survivor.name} promoted (timeline {r.facts['timeline']}), archiving its own timeline")
        Cluster.sql(survivor, "CHECKPOINT")  # pg_control on the new timeline (a promotion does not wait for one)
        repo.run("check")
        r.facts["incremental_backup_after_failover_seconds"] = round(repo.timed("backup", "--type=incr"), 1)
        time.sleep(args.after_failover)  # pacing: the sale goes on on the new leader

    try:
        log("etcd + 2 Patroni nodes (PostgreSQL 15), WAL archived by pgBackRest from the leader")
        cluster.start()
        repo.run("stanza-create")
        repo.run("check")  # a segment pushed by the leader and found in the repository
        leader = cluster.leader()
        assert leader is not None
        Cluster.sql(leader, f'CREATE DATABASE "{DBNAME}"')
        tokens = prepare_database(r, repo, cluster.url(DBNAME))
        full = json.loads(repo.run("info", "--output=json").stdout)[0]["backup"][-1]["label"]
        load, t_mono, t_db = sale_and_mistake(r, tokens, url=cluster.url(DBNAME), primary=primary, midway=failover)
        cluster.stop()  # the damaged cluster is left alone (here: stopped, to spare the two cores)
        restore(r, repo, t_db, f"--set={full}")  # the old leader's backup: the replay crosses the failover
        prove(r, load, t_mono, tokens)
    finally:
        r.copy.stop()
        cluster.stop()
        log("stopped: the copy's PostgreSQL (pg_ctl stop), Patroni nodes, etcd, gunicorns and sweepers by pid")
    return report(r, "make restore-rehearsal (Patroni, after a failover)")


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.exit(main())
