"""Stock buckets measured (issue 17): one hot product beyond one row, in ONE run on ONE database.

1. **The matrix** (pgbench, ``-j 2``, a fixed duration per cell): the service's own checkout statements on one hot
   product (101) with K = 1, 4, 8, 16 stock buckets at 16, 64 and 256 clients; beside them, at the same client
   counts, the same statements spread over the 1,000 spread products (K = 1 each) and the seed's transaction on the
   hot product (bench.drivers' ``limit-hot-seed-order``: one row, a fixed reference).
2. **PostgreSQL CPU per checkout**, the service's statements against the seed's transaction, each with pgbench
   ``-M prepared`` (server-side prepared statements) and ``-M simple`` (the values inlined in the statement text,
   which is what Django's client-side binding sends, behind PgBouncer): ``utime + stime`` from /proc of this worktree's
   postmaster and each of its children, read 2 s into the cell (every client connected) and 1 s before its end; the
   growth of each process (plus the processes that started in between) divided by the orders created in between
   (``CpuWindow``). The whole cell (connections included, the postmaster's ``cutime + cstime`` for the backends that
   exited) is kept in the JSON as ``pg_cpu_ms_per_checkout_cell``.
3. **HTTP**: wrk + bench/checkout.lua through gunicorn (bench.run's plumbing), the hot product with K = 1 and K = 8.

The pgbench scripts run the service's own statements: the quote read and ORDER_SQL (``payments.checkout``, through
``bench.strategies.quote_read`` / ``order_insert``), and the bucket claims exactly as
``inventory.reserve.stock_reserve`` sends them, recorded from the service itself at the start of the run
(``bench.service_trace``: a request no single bucket covers, in a transaction rolled back, so every claim attempt
misses and shows itself; its statements and parameters, in order):

* K = 1: the quote read, ORDER_SQL, the guarded UPDATE of bucket 0 (bench.strategies' ``guarded_update`` script);
* K > 1: the quote read, ORDER_SQL, SAVEPOINT, the first recorded claim
  (a free bucket, ``SKIP LOCKED``); no row back: ROLLBACK TO SAVEPOINT, SAVEPOINT (unless the service keeps one
  savepoint for every attempt), the next recorded claim (a waiting claim), for each recorded one; still none: the
  service's full pass (lock every bucket, move units, Python
  decides) is NOT scripted: the script rolls back and counts a *fallback needed* (``bench_bucket_fallback``). With
  stock that never runs out a waiting pass cannot come back empty, so the count must be 0; it is reported.
  Checkouts that needed a waiting pass are counted by ``SELECT nextval('bench_bucket_waited')`` after their COMMIT
  (a statement the service does not send, outside the transaction, only on that path).

The claim statements return no row when they find no bucket, so they are run with ``\\aset`` (no assignment when
no row) after ``\\set bucket -1``. Committed checkouts are counted as the orders that exist afterwards.

Stock: the hot product keeps at least ``STOCK_FLOOR`` available units (topped up to ``STOCK_BIG`` with
``inventory.services.stock_adjust``) and gets its K with ``inventory.services.stock_buckets_set`` (which spreads
the available units evenly) before each group of cells, in a ``manage.py shell`` child, so the ledger stays
consistent; ``manage.py audit_inventory`` runs at the end and must be clean (exit code 1 otherwise).

    python -m bench.buckets                                  # fresh skincare_bench, everything (about 8 minutes)
    python -m bench.buckets --duration 3 --clients 16,64 --buckets 1,8 --no-http --no-docs
    python -m bench.buckets --render bench-results/buckets.json   # the tables of a saved run, written again
    python -m bench.buckets --reuse-db --buckets 1,16 --no-seed --no-http --no-docs --cpu-rounds 0 \
        --claim service,random,order-wait --rounds 3             # claim variants A/B (VARIANTS), medians
    python -m bench.buckets ... --sample                         # + who holds the buckets, every 10 ms
    python -m bench.buckets --merge a.json,b.json --out ab.json --no-docs   # saved runs' rounds as one
    python -m bench.run                                      # make bench: runs this after the strategy matrix
                                                             # (--no-buckets skips it)

Writes bench-results/buckets.json and the tables between the ``buckets`` markers of docs/benchmarks.md.
"""

import argparse
import contextlib
import functools
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import strategies
from bench.drivers import audit, run_pgbench, run_wrk
from bench.drivers import pgbench_script as limits_script
from bench.report import DOCS, machine_info, server_settings, update_docs
from bench.sampling import wait_for_quiet
from bench.seeding import HOT, STOCK_BIG, seed
from bench.tools import ensure_tools
from devtools.processes import PY, RESULTS, ROOT, Gunicorn, django_env, log, manage
from devtools.processes import server_url as db_url

MARK_START, MARK_END = "<!-- buckets:results:start -->", "<!-- buckets:results:end -->"
KS = [1, 4, 8, 16]
CLIENTS = [16, 64, 256]
STOCK_FLOOR = 2_000_000  # the hot product is topped up to STOCK_BIG below this many available units
SEQUENCES = ("bench_bucket_waited", "bench_bucket_fallback")
# Goals of issue 26 (item 6): bucketed hot / the reference at the same client count.
GOALS = ((64, "one row (K=1)", "hot-1", 3.0), (64, "spread", "spread", 0.7), (256, "spread", "spread", 0.5))


Claim = tuple[str, dict[str, Any]]
# What each parameter of a claim statement becomes in the script; the other (text) parameters, the ledger reason,
# keep the value the service sent. A parameter that is neither is an error: the script cannot drift.
CLAIM_VARIABLES = {"product_id": ":p1", "qty": "1", "order_id": ":o_id"}


@functools.cache
def _service_trace(url: str) -> dict[str, Any]:
    proc = subprocess.run(
        [PY, "-m", "bench.service_trace"], cwd=ROOT, env=django_env(url), capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        print(proc.stdout + proc.stderr, flush=True)
        raise SystemExit("bench.service_trace could not record the service's claims")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def service_claims(url: str) -> tuple[Claim, ...]:
    """The service's claim attempts, in order (the first without waiting, then the waiting passes), recorded from
    ``stock_reserve`` itself in a child process on the database at ``url`` (bench.service_trace)."""
    return tuple((sql, params) for sql, params in _service_trace(url)["claims"])


def service_one_savepoint(url: str) -> bool:
    """Whether the service's claim attempts share one savepoint (bench.service_trace)."""
    return bool(_service_trace(url)["one_savepoint"])


def claim_script(claim: Claim, buckets: int) -> str:
    """One recorded claim for one unit of ``:p1`` in ``buckets`` buckets, for the order ``:o_id``; ``\\aset`` sets
    ``:bucket`` only when it returns a row."""
    sql, params = claim
    values = {}
    for name, value in params.items():
        if name == "bucket_count":
            values[name] = str(buckets)
        elif name in CLAIM_VARIABLES:
            values[name] = CLAIM_VARIABLES[name]
        elif isinstance(value, str):
            values[name] = "'" + value.replace("'", "''") + "'"
        else:
            raise SystemExit(f"the service's claim takes a parameter bench.buckets does not know: {name}={value!r}")
    return f"{strategies.pgbench_sql(sql, **values)} \\aset"


def _claims_after_a_miss(claims: Sequence[Claim], buckets: int, attempt: int = 2, *, one_savepoint: bool) -> list[str]:
    """The claims after the first, each run only when everything before it found no bucket: the miss before it
    rolled back to its savepoint, a new savepoint (unless ``one_savepoint``: the first one, which a ROLLBACK TO
    keeps), the claim (as the service sent them)."""
    if not claims:
        return []
    rollback = "ROLLBACK TO SAVEPOINT claim1;" if one_savepoint else f"ROLLBACK TO SAVEPOINT claim{attempt - 1};"
    savepoint = [] if one_savepoint else [f"SAVEPOINT claim{attempt};"]
    return ["\\if :bucket < 0", "\\set waited 1", rollback, *savepoint, claim_script(claims[0], buckets),
            *_claims_after_a_miss(claims[1:], buckets, attempt + 1, one_savepoint=one_savepoint), "\\endif"]  # fmt: skip


def hot_script(buckets: int, customer_id: int, claims: Sequence[Claim], *, one_savepoint: bool = False) -> str:
    """One checkout of the hot product with ``buckets`` stock buckets, as the service sends it (``claims``: the
    service's recorded claim attempts, or a variant's; ``one_savepoint``: the attempts share one savepoint)."""
    if buckets == 1:
        return strategies.pgbench_script("guarded_update", "hot", customer_id)
    lockkey = f"\\set lockkey {strategies.service_sql()['CUSTOMER_KEY_BASE']} + random(1, 1000000000)"
    lines = [
        f"\\set p1 {HOT}",
        f"\\set cust {customer_id}",
        lockkey,
        "\\set bucket -1",
        "\\set waited 0",
        "BEGIN;",
        strategies.quote_read(["p1"]),
        "\\if :avail >= 1",
        strategies.order_insert(["p1"]),
        "SAVEPOINT claim1;",  # each claim attempt runs after a savepoint, rolled back on a miss
        claim_script(claims[0], buckets),
        *_claims_after_a_miss(claims[1:], buckets, one_savepoint=one_savepoint),
        "\\if :bucket >= 0",
        "COMMIT;",
        "\\else",
        "ROLLBACK;",  # the service's full pass would run here (not scripted): counted
        "SELECT nextval('bench_bucket_fallback');",
        "\\endif",
        "\\if :waited = 1",
        "SELECT nextval('bench_bucket_waited');",
        "\\endif",
        "\\else",
        "ROLLBACK;",
        "\\endif",
    ]
    return "\n".join(lines) + "\n"


# --- claim variants (issue 26 item 3: a bucket claim that rarely misses) ---------------------------------------
# ``--claim`` runs the hot product's bucketed cells with other claims beside the service's: each variant is what the
# service would send with that claim, the service's own reserve statement (``inventory.reserve._reserve_statement``)
# around another pick, in the service's script shape (the claim attempts after a savepoint rolled back on a miss,
# then the full pass, counted as a fallback). ``service`` is the claim recorded from ``stock_reserve`` as it is now.
# ``mod()`` instead of ``%``: the text is also a psycopg statement, where ``%`` starts a parameter.
VARIANT_PICK = """
SELECT bucket FROM stock_buckets
     WHERE product_id = %(product_id)s AND bucket < %(bucket_count)s AND available_stock >= %(qty)s
     ORDER BY {order} LIMIT 1{lock}
"""
VARIANT_ORDERS = {
    # a bucket at random (the claim of issue 17)
    "random": "random()",
    # the connection's own bucket (its backend's pid mod K) first, then the next ones round the ring
    "pid": "mod(bucket + %(bucket_count)s - mod(pg_backend_pid(), %(bucket_count)s), %(bucket_count)s)",
    # the order's bucket (its id mod K: concurrent checkouts hold consecutive ids) first, then round the ring
    "order": "mod(bucket + %(bucket_count)s - mod(%(order_id)s, %(bucket_count)s), %(bucket_count)s)",
}
# name -> (order, first attempt skips locked buckets, attempts in all, one savepoint for every attempt)
VARIANTS = {
    "random": ("random", True, 3, False),
    "pid": ("pid", True, 3, False),
    "order": ("order", True, 3, False),
    "order-1sp": ("order", True, 3, True),  # one SAVEPOINT, rolled back to before each next attempt
    "pid-1sp": ("pid", True, 3, True),
    "order-wait": ("order", False, 3, False),  # no SKIP LOCKED attempt: wait for the order's bucket at once
    "pid-wait": ("pid", False, 3, False),
}


def variant_claims(name: str, url: str) -> tuple[tuple[Claim, ...], bool]:
    """The claim attempts of variant ``name`` and whether they share one savepoint; ``service``: the service's own
    (recorded), with its savepoint shape (``bench.service_trace``)."""
    if name == "service":
        return service_claims(url), service_one_savepoint(url)
    order, skip_first, attempts, one_savepoint = VARIANTS[name]
    strategies.service_sql()  # Django set up
    from inventory.reserve import _reserve_statement

    params = dict(service_claims(url)[0][1])  # the service's parameters (names and the ledger reason's text)

    def claim(lock: str) -> Claim:
        return _reserve_statement(pick=VARIANT_PICK.format(order=VARIANT_ORDERS[order], lock=lock)), params

    skip = "\n       FOR NO KEY UPDATE SKIP LOCKED"
    first = claim(skip if skip_first else "")
    return (first, *[claim("")] * (attempts - 1)), one_savepoint


# The cells: what runs, on which product, with how many buckets on the hot product.
SUBJECTS = {
    "spread": "the service's statements over 1,000 products (K = 1 each)",
    "seed": "the seed's transaction on the hot product (one row)",
    "seed-spread": "the seed's transaction over 1,000 products (bench.drivers' limit-spread)",
}


def cell_script(subject: str, customer_id: int, url: str) -> str:
    """``hot-K`` (the service, K buckets), ``hot-K@variant`` (K buckets, a claim variant), ``spread`` or ``seed``."""
    if subject == "spread":
        return strategies.pgbench_script("guarded_update", "spread", customer_id)
    if subject == "seed":
        return limits_script("limit-hot-seed-order", customer_id)
    if subject == "seed-spread":
        return limits_script("limit-spread", customer_id)
    claims, one_savepoint = variant_claims(claim_variant(subject), url)
    return hot_script(hot_buckets(subject), customer_id, claims, one_savepoint=one_savepoint)


def hot_buckets(subject: str) -> int:
    """The K the hot product must have for ``subject`` (the seed's UPDATE has no bucket filter: one row)."""
    return int(subject.split("-")[1].partition("@")[0]) if subject.startswith("hot-") else 1


def claim_variant(subject: str) -> str:
    """The claim of a ``hot-K[@variant]`` subject: the variant, or ``service``."""
    return subject.partition("@")[2] or "service"


# --- PostgreSQL CPU, from /proc --------------------------------------------------------------------------------


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat from field 3 (state) on; None once the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rpartition(")")[2].split()


def _postmaster() -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int((ROOT / ".data/pg/postmaster.pid").read_text().split()[0])
    return None


def _children(postmaster: int) -> list[int]:
    """The postmaster's live children (backends, checkpointer, WAL writer, autovacuum ...)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields and int(fields[1]) == postmaster:  # fields[1] = ppid
                found.append(int(entry.name))
    return found


def _client_backends(postmaster: int) -> int:
    """Children whose title says they serve a client connection (``[local]`` or an address)."""
    count = 0
    for pid in _children(postmaster):
        with contextlib.suppress(OSError):
            title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if "[local]" in title or "127.0.0.1" in title:
                count += 1
    return count


def pg_cpu_seconds() -> float | None:
    """utime + stime of every process of this worktree's PostgreSQL, plus the postmaster's cutime + cstime (its
    children that exited); None when the server is not the embedded one (DATABASE_URL elsewhere)."""
    postmaster = _postmaster()
    fields = _stat(postmaster) if postmaster else None
    if postmaster is None or fields is None:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    total = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime (fields 14-17 of stat)
    for pid in _children(postmaster):
        child = _stat(pid)
        if child:
            total += int(child[11]) + int(child[12])
    return total / tick


def pg_cpu_by_process() -> dict[int, float]:
    """CPU seconds (utime + stime) of the postmaster and each live child, by pid (zombies left out: an exiting
    process may read as zero before the postmaster reaps it)."""
    postmaster = _postmaster()
    if postmaster is None:
        return {}
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in [postmaster, *_children(postmaster)]:
        fields = _stat(pid)
        if fields and fields[0] not in ("Z", "X"):
            out[pid] = (int(fields[11]) + int(fields[12])) / tick
    return out


def window_cpu(before: dict[int, float], after: dict[int, float]) -> float | None:
    """CPU used between two ``pg_cpu_by_process`` readings: the growth of each process alive at both, plus all of
    each process that started in between. A process that exited in between is left out (the cells' clients stay
    connected; what that misses is the last moments of an autovacuum worker), so an exit can never make the sum
    drop, as the postmaster's cutime can while a child is exiting."""
    if not before or not after:
        return None
    # a pid found smaller than before is a new process that reused the number: all of it is in the window
    return sum(cpu - before[pid] if cpu >= before.get(pid, cpu + 1) else cpu for pid, cpu in after.items())


class CpuWindow(threading.Thread):
    """PostgreSQL CPU over a window inside a running cell, from ``start_s`` to ``end_s`` after ``start()``: the
    clients are connected by then and still running, so neither backend start-up nor exit is counted. ``stop()``
    (the cell ended early) leaves the window unmeasured."""

    def __init__(self, start_s: float, end_s: float) -> None:
        super().__init__(daemon=True)
        self.start_s, self.end_s = start_s, end_s
        self.done = threading.Event()
        self.t0: float | None = None
        self.t1: float | None = None
        self.cpu0: dict[int, float] = {}
        self.cpu1: dict[int, float] = {}

    def run(self) -> None:
        if self.done.wait(self.start_s):
            return
        self.t0, self.cpu0 = time.time(), pg_cpu_by_process()
        if self.done.wait(self.end_s - self.start_s):
            self.t0 = None
            return
        self.t1, self.cpu1 = time.time(), pg_cpu_by_process()

    def stop(self) -> None:
        self.done.set()
        self.join()

    def seconds(self) -> float | None:
        return window_cpu(self.cpu0, self.cpu1) if self.t0 is not None and self.t1 is not None else None


# --- who holds the buckets (--sample) --------------------------------------------------------------------------
# Each bucket of the hot product, with the backend that holds it, if any: the version a new snapshot sees has the
# holder's (sub)transaction id as xmax while the holder is in progress (it locked or updated the row), and every
# transaction holds the lock on its own id in pg_locks (a savepoint's too). A row locked by two transactions at once
# (a multixact) shows as free: bucketed checkouts never share a bucket.
HOLDERS_SQL = """
SELECT b.bucket, a.state, a.wait_event_type, a.wait_event, left(a.query, 40)
  FROM stock_buckets b
  LEFT JOIN pg_locks l ON l.locktype = 'transactionid' AND l.mode = 'ExclusiveLock' AND l.granted
                      AND l.transactionid = b.xmax
  LEFT JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE b.product_id = %s AND b.bucket < %s
"""
# The same count in one scan: each bucket's visible version whose xmax (the holder's transaction or savepoint) is
# still in progress (``txid_status``; the epoch taken from the current snapshot).
HELD_SQL = """
SELECT count(*) FILTER (WHERE xmax <> '0' AND txid_status(
           (txid_snapshot_xmax(txid_current_snapshot()) >> 32 << 32) + xmax::text::bigint) = 'in progress')
  FROM stock_buckets WHERE product_id = %s AND bucket < %s
"""
WAITERS_SQL = """
SELECT count(*) FILTER (WHERE wait_event_type = 'Lock'), count(*) FILTER (WHERE state = 'active'),
       count(*) FILTER (WHERE state = 'idle in transaction')
  FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
"""


def _holder_state(state: str | None, wait_type: str | None, wait: str | None, query: str | None) -> str:
    statement = (query or "").lstrip().lower()
    where = f"{wait_type}: {wait}" if wait_type else "on CPU"
    if state == "idle in transaction":
        return "idle in transaction (answer sent, COMMIT not yet received)"
    if statement.startswith("commit"):
        return f"in COMMIT ({where})"
    if statement.startswith("with pick"):
        return f"in the claim ({where})"
    return f"{state} in {statement[:12]!r} ({where})"


class ActivitySampler(threading.Thread):
    """Every ``interval`` s from ``start_s`` to ``end_s``: which of the hot product's K buckets are held and where
    each holder is (pg_stat_activity), and how many backends wait for a lock."""

    def __init__(self, url: str, buckets: int, start_s: float, end_s: float, interval: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.url, self.buckets, self.start_s, self.end_s, self.interval = url, buckets, start_s, end_s, interval
        self.done = threading.Event()
        self.samples: list[tuple[int, int, int, int, dict[str, int]]] = []
        self.held: list[int] = []

    def run(self) -> None:
        if self.done.wait(self.start_s):
            return
        deadline = time.monotonic() + self.end_s - self.start_s
        with _connect(self.url) as conn:
            while time.monotonic() < deadline and not self.done.is_set():
                self.held.append(conn.execute(HELD_SQL, [HOT, self.buckets]).fetchone()[0])
                rows = conn.execute(HOLDERS_SQL, [HOT, self.buckets]).fetchall()
                waiting, active, idle = conn.execute(WAITERS_SQL).fetchone()
                states: dict[str, int] = {}
                for _bucket, state, wait_type, wait, query in rows:
                    if state is not None:
                        key = _holder_state(state, wait_type, wait, query)
                        states[key] = states.get(key, 0) + 1
                self.samples.append((sum(states.values()), waiting, active, idle, states))
                self.done.wait(self.interval)

    def stop(self) -> None:
        self.done.set()
        self.join()

    def summary(self) -> dict[str, Any]:
        n = len(self.samples)
        if not n:
            return {}
        states: dict[str, float] = {}
        for *_, by_state in self.samples:
            for key, count in by_state.items():
                states[key] = states.get(key, 0) + count / n
        return {
            "samples": n,
            "held_mean": round(sum(s[0] for s in self.samples) / n, 2),
            "all_held_share": round(sum(1 for s in self.samples if s[0] >= self.buckets) / n, 3),
            "held_one_scan_mean": round(sum(self.held) / len(self.held), 2),
            "all_held_one_scan_share": round(sum(1 for h in self.held if h >= self.buckets) / len(self.held), 3),
            "lock_waiters_mean": round(sum(s[1] for s in self.samples) / n, 1),
            "active_mean": round(sum(s[2] for s in self.samples) / n, 1),
            "idle_in_tx_mean": round(sum(s[3] for s in self.samples) / n, 1),
            "holders_by_state": {k: round(v, 2) for k, v in sorted(states.items(), key=lambda kv: -kv[1])},
        }


def wait_for_backends_gone(deadline_s: float = 10.0) -> None:
    """Until no client backend is left (the last cell's or our counters' connections exit asynchronously), so that
    a CPU reading includes all of their work; polls with a deadline."""
    postmaster = _postmaster()
    if postmaster is None:
        return
    deadline = time.monotonic() + deadline_s
    while _client_backends(postmaster) and time.monotonic() < deadline:
        time.sleep(0.05)


# --- database helpers ------------------------------------------------------------------------------------------


def _connect(url: str) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True)


def prepare_database(url: str) -> None:
    with _connect(url) as conn:
        for seq in SEQUENCES:
            conn.execute(f"CREATE SEQUENCE IF NOT EXISTS {seq}")


_SET_HOT = """
from inventory import services
from inventory.models import Inventory
inv = Inventory.objects.get(product_id={pid})
if inv.available_stock < {floor}:
    services.stock_adjust(product_id={pid}, delta={big} - inv.available_stock, note="bench top-up", reason="restock")
services.stock_buckets_set(product_id={pid}, buckets={k})
inv = Inventory.objects.get(product_id={pid})
print("available", inv.available_stock, "reserved", inv.reserved_stock)
"""


def set_hot(url: str, buckets: int) -> str:
    """The hot product topped up (stock_adjust, a restock ledger row) when low, and spread over ``buckets`` buckets
    (stock_buckets_set, rebalance ledger rows), through the services in a ``manage.py shell`` child."""
    code = _SET_HOT.format(pid=HOT, floor=STOCK_FLOOR, big=STOCK_BIG, k=buckets)
    out = manage(url, "shell", "-c", code, quiet=True).stdout.strip().splitlines()
    return out[-1] if out else ""


# --- one cell ----------------------------------------------------------------------------------------------------


def run_cell(
    url: str,
    subject: str,
    *,
    clients: int,
    duration: int,
    customer_id: int,
    mode: str = "prepared",
    sample: bool = False,
) -> dict[str, Any]:
    """One pgbench cell with its outcomes and the PostgreSQL CPU per committed checkout."""
    before = strategies.reset_counters(url, SEQUENCES)
    wait_for_backends_gone()
    cpu0 = pg_cpu_seconds()
    # from 2 s after the start (clients connected) to 1 s before the end of the -T duration (none has left yet)
    window = CpuWindow(min(2.0, 0.3 * duration), max(duration - 1.0, 0.6 * duration))
    window.start()
    sampler = None
    if sample and hot_buckets(subject) > 1:
        sampler = ActivitySampler(url, hot_buckets(subject), window.start_s, window.end_s)
        sampler.start()
    r = run_pgbench(
        url,
        f"buckets-{subject.replace('@', '_')}-c{clients}-{mode}",
        duration=duration,
        connections=clients,
        customer_id=customer_id,
        script_text=cell_script(subject, customer_id, url),
        query_mode=mode,
    )
    window.stop()
    if sampler is not None:
        sampler.stop()
    wait_for_backends_gone()
    cpu1 = pg_cpu_seconds()
    in_cpu = window.seconds()
    with _connect(url) as conn:
        committed = conn.execute("SELECT count(*) FROM orders WHERE id > %s", [before["max_order_id"]]).fetchone()[0]
        in_window = (
            conn.execute(
                "SELECT count(*) FROM orders WHERE id > %s AND created_at >= to_timestamp(%s) "
                "AND created_at < to_timestamp(%s)",
                [before["max_order_id"], window.t0, window.t1],
            ).fetchone()[0]
            if in_cpu is not None
            else 0
        )
    after = strategies.counters(url, SEQUENCES)
    pg_cpu = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
    out = {
        "subject": subject,
        "clients": clients,
        "mode": mode,
        "duration_s": duration,
        "committed": committed,
        "ok_per_s": round(committed / duration, 1),
        "processed": r["processed"],
        "refused": max(0, r["processed"] - committed),
        "waited": after["bench_bucket_waited"],
        "fallback_needed": after["bench_bucket_fallback"],
        "failed": r["failed"],
        "p50_ms": r["p50_ms"],
        "p99_ms": r["p99_ms"],
        "pg_cpu_s": None if pg_cpu is None else round(pg_cpu, 2),
        # the whole cell, connections included
        "pg_cpu_ms_per_checkout_cell": round(1000 * pg_cpu / committed, 3)
        if pg_cpu is not None and committed
        else None,
        # the window inside the cell (all clients connected): the figure reported
        "window_s": None if in_cpu is None else round(window.t1 - window.t0, 2),  # type: ignore[operator]
        "window_checkouts": in_window,
        "window_cpu_s": None if in_cpu is None else round(in_cpu, 3),
        "pg_cpu_ms_per_checkout": round(1000 * in_cpu / in_window, 3) if in_cpu is not None and in_window else None,
        "machine_cpu_pct": r["machine_cpu_pct"],
        "other_cpu_pct": r["other_cpu_pct"],
        "loadgen_cpu_pct": r["loadgen_cpu_pct"],
        "activity": sampler.summary() if sampler is not None else None,
    }
    if out["activity"]:
        log(f"    activity: {out['activity']}")
    log(
        f"  {subject:>7} c={clients:<3} -M {mode:<8} {out['ok_per_s']:7.1f} checkouts/s, p99 {out['p99_ms']} ms, "
        f"PG CPU {out['pg_cpu_ms_per_checkout']} ms/checkout, waited {out['waited']}, fallback {out['fallback_needed']}, "
        f"refused {out['refused']}, failed {out['failed']}, machine {out['machine_cpu_pct']}% (other {out['other_cpu_pct']}%)"
    )
    return out


# --- the run -------------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.buckets")
    parser.add_argument("--duration", type=int, default=8, help="seconds per cell (default 8)")
    parser.add_argument("--clients", default=",".join(map(str, CLIENTS)), help="pgbench client counts")
    parser.add_argument("--buckets", default=",".join(map(str, KS)), help="K values for the hot product (1 first)")
    parser.add_argument("--cpu-clients", type=int, default=64, help="client count of the -M prepared/simple cells")
    parser.add_argument("--cpu-buckets", default="1,8", help="K values of the -M prepared/simple cells")
    parser.add_argument("--cpu-rounds", type=int, default=2, help="rounds of the -M prepared/simple cells")
    parser.add_argument("--connections", type=int, default=100, help="wrk connections (bench.run's default)")
    parser.add_argument(
        "--workers", type=int, default=int(os.environ.get("WEB_CONCURRENCY", (os.cpu_count() or 2) + 1))
    )
    parser.add_argument("--http-buckets", default="1,8", help="K values of the HTTP runs")
    parser.add_argument("--no-http", action="store_true", help="skip the HTTP runs")
    parser.add_argument("--quiet-wait", type=int, default=0, help="max seconds to wait for an idle machine per cell")
    parser.add_argument("--dbname", default="skincare_bench", help="benchmark database (dropped and re-created)")
    parser.add_argument("--reuse-db", action="store_true", help="use the seeded benchmark database as it is")
    parser.add_argument("--no-docs", action="store_true", help="do not touch docs/ (results in bench-results/)")
    parser.add_argument("--render", metavar="JSON", help="only write the tables of a saved run (buckets.json) again")
    parser.add_argument("--claim", default="service", help="claims of the bucketed cells: service (the service's "
                        f"own, recorded) and variants of {', '.join(VARIANTS)} (comma-separated)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=1, help="rounds of the matrix, every other one in reverse "
                        "order (A B A B): medians per cell")  # fmt: skip
    parser.add_argument("--first-round", type=int, default=1, help="number of the first round (its parity sets the "
                        "order: runs of one round each continue an alternation)")  # fmt: skip
    parser.add_argument("--no-seed", action="store_true", help="no cells of the seed's transaction")
    parser.add_argument("--sample", action="store_true", help="sample who holds the buckets (pg_stat_activity, "
                        "every 10 ms) in the bucketed cells")  # fmt: skip
    parser.add_argument("--out", default="buckets.json", help="the results file under bench-results/")
    parser.add_argument("--merge", metavar="JSON", help="comma-separated saved runs (bench-results/...): their "
                        "matrix cells together, medians per cell, written to --out (nothing runs)")  # fmt: skip
    args = parser.parse_args(argv)
    args.claim = args.claim.split(",")
    unknown = [v for v in args.claim if v != "service" and v not in VARIANTS]
    if unknown:
        parser.error(f"unknown --claim {', '.join(unknown)}: service or one of {', '.join(VARIANTS)}")
    args.clients = [int(c) for c in args.clients.split(",")]
    args.buckets = [int(k) for k in args.buckets.split(",")]
    args.cpu_buckets = [int(k) for k in args.cpu_buckets.split(",")]
    args.http_buckets = [int(k) for k in args.http_buckets.split(",")]
    if 1 not in args.buckets:
        parser.error("--buckets must include 1 (one row: the reference)")
    return args


def matrix_subjects(args: argparse.Namespace) -> list[str]:
    """Hot K = 1 first (one row, before the product was ever bucketed), the seed and spread beside it, then each
    K > 1 with each claim of --claim."""
    base = ["hot-1", *([] if args.no_seed else ["seed"]), "spread"]
    bucketed = [f"hot-{k}" + ("" if v == "service" else f"@{v}") for k in args.buckets if k != 1 for v in args.claim]
    return base + bucketed


def _matrix(url: str, customer_id: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The subjects (:func:`matrix_subjects`) at each client count, in --rounds rounds, every other one in reverse
    order; the hot product's K is set when it changes."""
    cells = []
    current_k = None
    subjects = matrix_subjects(args)
    for r in range(args.first_round, args.first_round + args.rounds):
        for subject in subjects if r % 2 == 1 else subjects[::-1]:
            k = hot_buckets(subject)
            if k != current_k:
                log(f"round {r} {subject}: hot product -> {set_hot(url, k)} in {k} bucket(s)")
                current_k = k
            for clients in args.clients if r % 2 == 1 else args.clients[::-1]:
                wait_for_quiet(args.quiet_wait)
                cell = run_cell(url, subject, clients=clients, duration=args.duration, customer_id=customer_id,
                                sample=args.sample)  # fmt: skip
                cells.append({**cell, "round": r})
    return cells


def matrix_medians(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One cell per (subject, clients, mode): the median of its rounds (checkouts/s, p99, miss rate, PG CPU per
    checkout), the sums of its outcomes, each round's checkouts/s."""
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for cell in cells:
        groups.setdefault((cell["subject"], cell["clients"], cell["mode"]), []).append(cell)

    def median(group: list[dict[str, Any]], key: str) -> float | None:
        values = [c[key] for c in group if c.get(key) is not None]
        return round(statistics.median(values), 3) if values else None

    out = []
    for (subject, clients, mode), group in groups.items():
        for c in group:
            c["miss_pct"] = round(100 * c["waited"] / max(1, c["committed"] + c["fallback_needed"]), 1)
        out.append({
            "subject": subject, "clients": clients, "mode": mode, "rounds": len(group),
            "ok_per_s": median(group, "ok_per_s"), "p99_ms": median(group, "p99_ms"),
            "miss_pct": median(group, "miss_pct"), "pg_cpu_ms_per_checkout": median(group, "pg_cpu_ms_per_checkout"),
            "ok_per_s_rounds": [c["ok_per_s"] for c in group], "miss_pct_rounds": [c["miss_pct"] for c in group],
            **{key: sum(c[key] for c in group) for key in ("committed", "waited", "fallback_needed", "refused", "failed")},
            "other_cpu_pct": median(group, "other_cpu_pct"),
        })  # fmt: skip
    return out


def _cpu_cells(url: str, customer_id: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    """-M prepared and -M simple back to back, at --cpu-clients: the service (K values, spread) and the seed; in
    --cpu-rounds rounds, every other round in the reverse order (subjects and modes), so noise spreads over all."""
    cells = []
    subjects = [f"hot-{k}" for k in sorted(args.cpu_buckets, reverse=True)] + ["seed", "spread", "seed-spread"]
    for r in range(args.cpu_rounds):
        for subject in subjects if r % 2 == 0 else subjects[::-1]:
            log(f"CPU round {r + 1} {subject}: hot product -> {set_hot(url, hot_buckets(subject))}")
            for mode in ("prepared", "simple") if r % 2 == 0 else ("simple", "prepared"):
                wait_for_quiet(args.quiet_wait)
                cell = run_cell(
                    url, subject, clients=args.cpu_clients, duration=args.duration, customer_id=customer_id, mode=mode
                )
                cells.append({**cell, "round": r + 1})
    return cells


def cpu_summary(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (subject, clients, mode): PG CPU per checkout over all its rounds (the windows' CPU summed over
    their checkouts summed), each round's figure, and the mean checkouts/s."""
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for cell in cells:
        groups.setdefault((cell["subject"], cell["clients"], cell["mode"]), []).append(cell)
    out = []
    for (subject, clients, mode), group in groups.items():
        per = [c["pg_cpu_ms_per_checkout"] for c in group if c["pg_cpu_ms_per_checkout"] is not None]
        measured = [c for c in group if c.get("window_cpu_s") is not None and c["window_checkouts"]]
        cpu = sum(c["window_cpu_s"] for c in measured)
        checkouts = sum(c["window_checkouts"] for c in measured)
        out.append({
            "subject": subject, "clients": clients, "mode": mode,
            "pg_cpu_ms_per_checkout": round(1000 * cpu / checkouts, 3) if checkouts else (
                round(statistics.mean(per), 3) if per else None),
            "rounds_ms": per, "ok_per_s": round(statistics.mean(c["ok_per_s"] for c in group), 1),
        })  # fmt: skip
    return out


def _http(url: str, tokens_file: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """wrk hot through gunicorn, once per K in --http-buckets; PostgreSQL CPU per 201 from the sampler."""
    rows = []
    server = Gunicorn(url, workers=args.workers).start()
    log(f"HTTP: gunicorn on {server.base}: {server.describe()}")
    try:
        run_wrk(server.base, "spread", duration=3, connections=args.connections, tokens_file=tokens_file,
                workers=server.worker_pids())  # fmt: skip  # warm-up
        for k in args.http_buckets:
            log(f"HTTP K={k}: hot product -> {set_hot(url, k)}")
            wait_for_quiet(args.quiet_wait)
            r = run_wrk(server.base, "hot", duration=args.duration, connections=args.connections,
                        tokens_file=tokens_file, workers=server.worker_pids())  # fmt: skip
            created = r["status_201"]
            pg_ms = 10 * r["postgres_cpu_pct"] * r["seconds"] / created if created else None
            row = {
                "buckets": k,
                "connections": args.connections,
                "ok_per_s": r["ok_per_s"],
                "conflicts_per_s": r["conflicts_per_s"],
                "p99_ms": r["p99_ms"],
                "p50_ms": r["p50_ms"],
                "status_5xx": r["status_5xx"],
                "errors": r["socket_errors"] + r["status_4xx_other"],
                "pg_cpu_ms_per_checkout": round(pg_ms, 3) if pg_ms is not None else None,
                "cpu_ms_per_request": r["cpu_ms_per_request"],
                "machine_cpu_pct": r["machine_cpu_pct"],
                "other_cpu_pct": r["other_cpu_pct"],
            }
            log(
                f"  HTTP hot K={k}: {row['ok_per_s']:.1f} 201/s, {row['conflicts_per_s']} 409/s, p99 {row['p99_ms']:.1f} ms, "
                f"5xx {row['status_5xx']}, PG CPU {row['pg_cpu_ms_per_checkout']} ms/checkout"
            )
            rows.append(row)
    finally:
        errors = server.errors_in_log()
        server.stop()
        if errors:
            log(f"gunicorn logged {len(errors)} error lines, e.g. {errors[0]}")
    return rows


def _find(cells: list[dict[str, Any]], subject: str, clients: int, mode: str = "prepared") -> dict[str, Any] | None:
    for cell in cells:
        if (cell["subject"], cell["clients"], cell["mode"]) == (subject, clients, mode):
            return cell
    return None


def goals(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each goal of the issue per bucketed K: the measured ratio, the goal, met, and the distance (how much more
    throughput the bucketed figure needs, in checkouts/s and %)."""
    cells = report["matrix"]
    out = []

    def add(name: str, num: dict[str, Any] | None, den: dict[str, Any] | None, goal: float) -> None:
        if not num or not den or not den["ok_per_s"]:
            return
        ratio = num["ok_per_s"] / den["ok_per_s"]
        short = max(0.0, goal * den["ok_per_s"] - num["ok_per_s"])
        out.append({
            "goal": name, "measured": f"{num['ok_per_s']:.0f} / {den['ok_per_s']:.0f}", "ratio": round(ratio, 2),
            "target": goal, "met": ratio >= goal, "short_per_s": round(short),
            "short_pct": round(100 * short / num["ok_per_s"]) if num["ok_per_s"] else None,
        })  # fmt: skip

    bucketed = dict.fromkeys(c["subject"] for c in cells if hot_buckets(c["subject"]) > 1)
    for subject in bucketed:
        for clients, name, reference, goal in GOALS:
            add(f"{_label(subject)}, {clients} clients ≥ {goal}x {name} at {clients}",
                _find(cells, subject, clients), _find(cells, reference, clients), goal)  # fmt: skip
    return out


def cpu_goals(report: dict[str, Any]) -> list[dict[str, Any]]:
    """PostgreSQL CPU per checkout of the service's statements against the seed's transaction (same clients):
    same query mode, and the service as Django sends it (simple) against the seed prepared."""
    cells = report["cpu_summary"]
    clients = report["args"]["cpu_clients"]
    out = []
    pairs = [(f"hot-{k}", "seed") for k in report["args"]["cpu_buckets"]] + [("spread", "seed-spread")]
    for subject, reference in pairs:
        for mode, seed_mode in (("prepared", "prepared"), ("simple", "simple"), ("simple", "prepared")):
            svc, ref = _find(cells, subject, clients, mode), _find(cells, reference, clients, seed_mode)
            if not svc or not ref or svc["pg_cpu_ms_per_checkout"] is None or not ref["pg_cpu_ms_per_checkout"]:
                continue
            ratio = svc["pg_cpu_ms_per_checkout"] / ref["pg_cpu_ms_per_checkout"]
            out.append({
                "service": f"{_label(subject)} -M {mode}", "seed": f"{_label(reference)} -M {seed_mode}",
                "service_ms": svc["pg_cpu_ms_per_checkout"], "seed_ms": ref["pg_cpu_ms_per_checkout"],
                "ratio": round(ratio, 2), "met": ratio <= 1.0,
                "over_ms": round(max(0.0, svc["pg_cpu_ms_per_checkout"] - ref["pg_cpu_ms_per_checkout"]), 3),
            })  # fmt: skip
    return out


def _label(subject: str) -> str:
    if subject.startswith("hot-"):
        k, variant = hot_buckets(subject), claim_variant(subject)
        return "one row (K = 1)" if k == 1 else f"K = {k}" + ("" if variant == "service" else f", {variant}")
    return {
        "spread": "spread, 1,000 products",
        "seed": "seed's transaction, one row",
        "seed-spread": "seed's transaction, spread over 1,000 products",
    }[subject]


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


VARIANT_TEXT = {
    "service": "the service's claim (recorded from stock_reserve)",
    "random": "a random bucket, SKIP LOCKED; then 2 waiting passes on a random bucket; a savepoint per attempt",
    "pid": "the connection's bucket (pg_backend_pid() mod K) first, then round the ring, SKIP LOCKED; then 2 waiting "
    "passes on the first bucket with the units from it; a savepoint per attempt",
    "order": "the order's bucket (order id mod K) first, then round the ring, SKIP LOCKED; then 2 waiting passes on "
    "the first bucket with the units from it; a savepoint per attempt",
    "order-1sp": "as order, one savepoint for every attempt (ROLLBACK TO keeps it)",
    "pid-1sp": "as pid, one savepoint for every attempt (ROLLBACK TO keeps it)",
    "order-wait": "no SKIP LOCKED attempt: 3 waiting passes on the first bucket with the units from the order's",
    "pid-wait": "no SKIP LOCKED attempt: 3 waiting passes on the first bucket with the units from the connection's",
}


def variants_markdown(report: dict[str, Any]) -> list[str]:
    """The claims side by side (more than one claim in --claim): per client count, each claim's median checkouts/s
    [each round], miss rate, fallbacks, PostgreSQL CPU per checkout and its ratio to spread and to one row."""
    cells = report["matrix"]
    claims = report["args"].get("claim", ["service"])
    bucketed = [c for c in cells if hot_buckets(c["subject"]) > 1]
    if len(claims) < 2 or not bucketed:
        return []
    lines = [
        "The claims, A/B in alternating rounds: " + "; ".join(f"*{v}*: {VARIANT_TEXT[v]}" for v in claims) + ".",
        "",
        "| claim | clients | checkouts/s, median [rounds] | miss rate, median [rounds] | fallback | PG CPU "
        "ms/checkout | ÷ spread | ÷ one row |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for clients in report["args"]["clients"]:
        spread, one_row = _find(cells, "spread", clients), _find(cells, "hot-1", clients)
        for c in [c for c in bucketed if c["clients"] == clients]:
            rounds = " / ".join(f"{v:,.0f}" for v in c["ok_per_s_rounds"])
            misses = " / ".join(f"{v:.0f}" for v in c["miss_pct_rounds"])
            vs = [
                f"{c['ok_per_s'] / ref['ok_per_s']:.2f}" if ref and ref["ok_per_s"] else "-"
                for ref in (spread, one_row)
            ]
            cpu = "-" if c["pg_cpu_ms_per_checkout"] is None else f"{c['pg_cpu_ms_per_checkout']:.2f}"
            lines.append(f"| {_label(c['subject'])} | {clients} | {c['ok_per_s']:,.0f} [{rounds}] | "
                         f"{c['miss_pct']:.0f} % [{misses}] | {c['fallback_needed']} | {cpu} | {vs[0]} | {vs[1]} |")  # fmt: skip
    return [*lines, ""]


def markdown(report: dict[str, Any]) -> str:
    args = report["args"]
    cells = report["matrix"]
    subjects = list(dict.fromkeys(c["subject"] for c in cells))
    lines = [
        f"Run of {report['started']} (`{report['command']}`; pgbench `-j 2 -M prepared`, {args['duration']} s per "
        f"cell, {args.get('rounds', 1)} round(s), medians, all cells in one run on one database; the run took "
        f"{report['wall_seconds']} s after seeding). "
        f"**The machine is shared**: other engineers' test suites ran on its 2 cores during the run (load average "
        f"{report['load_before']} before it; *other CPU* = what neither this PostgreSQL nor pgbench used, per cell "
        "in bench-results/buckets.json): read the ratios within one run, not the absolute figures.",
        "",
        "Successful checkouts per second (p99 ms) on one hot product; pgbench runs the service's own statements "
        "(the quote read, ORDER_SQL, then RESERVE_SQL for K = 1, or for K > 1 the bucket claims stock_reserve "
        "sends, each after a savepoint rolled back on a miss); "
        "*spread* is the same statements over 1,000 products; *seed* is the seed's transaction on the hot "
        "product's one row:",
        "",
        "| clients | " + " | ".join(_label(s) for s in subjects) + " |",
        "|---:|" + "---:|" * len(subjects),
    ]
    for clients in args["clients"]:
        row = []
        for s in subjects:
            c = _find(cells, s, clients)
            row.append("-" if c is None else f"{c['ok_per_s']:,.0f} ({_ms(c['p99_ms'])})")
        lines.append(f"| {clients} | " + " | ".join(row) + " |")
    bucketed = [c for c in cells if c["subject"].startswith("hot-") and c["subject"] != "hot-1"]
    waited = ", ".join(
        f"{_label(c['subject'])} at {c['clients']}: {100 * c['waited'] / max(1, c['committed']):.0f} %"
        for c in bucketed
    )
    lines += [
        "",
        f"Checkouts that found no free bucket and took a waiting pass: {waited or '-'}. Fallback needed (no bucket "
        f"after {report['waiting_passes']} waiting passes: the full pass, not scripted): "
        f"{sum(c['fallback_needed'] for c in cells + report['cpu'])}. Refused (409 in the service): "
        f"{sum(c['refused'] for c in cells + report['cpu'])}; pgbench failures: "
        f"{sum(c['failed'] for c in cells + report['cpu'])}.",
        "",
        *variants_markdown(report),
        "| goal (issue 26) | measured checkouts/s | ratio | target | met | distance |",
        "|---|---:|---:|---:|---|---|",
    ]
    for g in report["goals"]:
        dist = "-" if g["met"] else f"{g['short_per_s']:,} checkouts/s short (+{g['short_pct']} % needed)"
        lines.append(
            f"| {g['goal']} | {g['measured']} | {g['ratio']:.2f} | {g['target']} | {'yes' if g['met'] else 'NO'} "
            f"| {dist} |"
        )
    cpu = report["cpu_summary"]
    lines += [
        "",
        f"PostgreSQL CPU per committed checkout (ms; every process of this PostgreSQL from /proc, over a window inside "
        f"the cell with every client connected) at {args['cpu_clients']} clients, pgbench `-M prepared` (server-side "
        "prepared statements) and "
        "`-M simple` (values inlined in the text: what Django's client-side binding sends, behind PgBouncer), back to back, in "
        f"{args.get('cpu_rounds', 1)} rounds (every other one in reverse order): all rounds together, [each round], "
        "(checkouts/s):",
        "",
        "| statements | -M prepared | -M simple |",
        "|---|---:|---:|",
    ]
    for subject in [f"hot-{k}" for k in sorted(args["cpu_buckets"], reverse=True)] + ["seed", "spread", "seed-spread"]:
        row = []
        for mode in ("prepared", "simple"):
            c = _find(cpu, subject, args["cpu_clients"], mode)
            rounds = " / ".join(f"{v:.2f}" for v in c["rounds_ms"]) if c else ""
            row.append("-" if c is None or c["pg_cpu_ms_per_checkout"] is None else
                       f"{c['pg_cpu_ms_per_checkout']:.2f} [{rounds}] ({c['ok_per_s']:,.0f}/s)")  # fmt: skip
        name = _label(subject) if subject.startswith("seed") else "service, " + _label(subject)
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    lines += ["", "| goal: service's PG CPU per checkout ≤ the seed's | service | seed | ratio | met | distance |",
              "|---|---:|---:|---:|---|---|"]  # fmt: skip
    for g in report["cpu_goals"]:
        dist = "-" if g["met"] else f"+{g['over_ms']:.3f} ms per checkout over"
        lines.append(
            f"| {g['service']} vs {g['seed']} | {g['service_ms']:.3f} | {g['seed_ms']:.3f} | {g['ratio']:.2f} | "
            f"{'yes' if g['met'] else 'NO'} | {dist} |"
        )
    if report["http"]:
        lines += [
            "",
            f"HTTP: wrk `-c{report['http'][0]['connections']}` through gunicorn ({report['gunicorn']}), "
            f"{args['duration']} s each, the hot product:",
            "",
            "| buckets | checkouts/s (201) | 409/s | p50 ms | p99 ms | 5xx | errors | PG CPU ms per checkout | "
            "CPU ms per request (workers + PG) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for h in report["http"]:
            lines.append(
                f"| K = {h['buckets']} | {h['ok_per_s']:,.0f} | {h['conflicts_per_s']:.0f} | {h['p50_ms']:.0f} | "
                f"{h['p99_ms']:.0f} | {h['status_5xx']} | {h['errors']} | {h['pg_cpu_ms_per_checkout']} | "
                f"{h['cpu_ms_per_request']} |"
            )
    lines += [
        "",
        f"`manage.py audit_inventory` after the run: {'clean' if report['audit_clean'] else '**FAILED**'}.",
        "",
        "Server settings: " + ", ".join(f"{k}={v}" for k, v in sorted(report["server_settings"].items())) + ".",
        "Machine: " + ", ".join(f"{k}={v}" for k, v in report["machine"].items()) + ".",
    ]
    return "\n".join(lines)


def run(url: str, tokens_file: Path, customer_id: int, args: argparse.Namespace, *, command: str) -> int:
    """Everything on the seeded database at ``url``; bench-results/buckets.json and the docs block. Exit code 1 on
    a failed audit, a pgbench failure, a fallback needed or an HTTP 5xx."""
    t0 = time.monotonic()
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    load_before = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    prepare_database(url)
    strategies.set_strategy(url, "guarded_update")  # after the strategy matrix: buckets need guarded_update
    report: dict[str, Any] = {
        "started": started,
        "command": command,
        "load_before": load_before,
        "args": {k: v for k, v in vars(args).items() if k not in ("reuse_db",)},
        "waiting_passes": len(service_claims(url)) - 1,
        "gunicorn": "",
    }
    log(f"stock buckets: pgbench matrix K={args.buckets} x clients={args.clients} + spread + seed")
    report["matrix_rounds"] = _matrix(url, customer_id, args)
    report["matrix"] = matrix_medians(report["matrix_rounds"])
    log(f"stock buckets: PostgreSQL CPU per checkout, -M prepared vs -M simple at {args.cpu_clients} clients")
    report["cpu"] = _cpu_cells(url, customer_id, args)
    report["cpu_summary"] = cpu_summary(report["cpu"])
    report["http"] = [] if args.no_http else _http(url, tokens_file, args)
    if report["http"]:
        report["gunicorn"] = Gunicorn(url, workers=args.workers).describe()
    set_hot(url, 1)
    report["audit_clean"] = audit(url)
    log(f"audit_inventory: {'clean' if report['audit_clean'] else 'FAILED'}")
    report["wall_seconds"] = round(time.monotonic() - t0)
    report["server_settings"] = server_settings(url)
    report["machine"] = machine_info()
    report["goals"] = goals(report)
    report["cpu_goals"] = cpu_goals(report)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / args.out).write_text(json.dumps(report, indent=2))
    block = markdown(report)
    print("\n" + block)
    if not args.no_docs:
        update_docs(block, DOCS, start=MARK_START, end=MARK_END)
        log(f"wrote the buckets block of {DOCS.relative_to(ROOT)}")
    all_cells = report["matrix_rounds"] + report["cpu"]
    bad = (
        not report["audit_clean"]
        or any(c["failed"] or c["fallback_needed"] for c in all_cells)
        or any(h["status_5xx"] for h in report["http"])
    )
    return 1 if bad else 0


def _customer_id(url: str) -> int:
    with _connect(url) as conn:
        row = conn.execute("SELECT id FROM auth_user WHERE username = 'bench-customer-00000'").fetchone()
        return int(row[0])


def render(path: Path, *, docs: bool) -> int:
    """The tables of a saved run (bench-results/buckets.json), printed and written to the docs again."""
    report = json.loads(path.read_text())
    report["cpu_summary"] = cpu_summary(report["cpu"])
    report["goals"], report["cpu_goals"] = goals(report), cpu_goals(report)
    block = markdown(report)
    print(block)
    if docs:
        update_docs(block, DOCS, start=MARK_START, end=MARK_END)
    return 0


def merge(paths: list[Path], *, out: Path, docs: bool) -> int:
    """Saved runs (each some rounds of the same matrix) as one: their cells together, medians per cell; the first
    run's settings, every run's command and load average."""
    reports = [json.loads(path.read_text()) for path in paths]
    report = reports[0]
    report["matrix_rounds"] = [c for r in reports for c in r.get("matrix_rounds", r["matrix"])]
    report["matrix"] = matrix_medians(report["matrix_rounds"])
    report["cpu"] = [c for r in reports for c in r["cpu"]]
    report["args"]["rounds"] = sum(r["args"].get("rounds", 1) for r in reports)
    report["command"] = "`; `".join(r["command"] for r in reports)
    report["load_before"] = " / ".join(r["load_before"] for r in reports)
    report["wall_seconds"] = sum(r["wall_seconds"] for r in reports)
    report["audit_clean"] = all(r["audit_clean"] for r in reports)
    out.write_text(json.dumps(report, indent=2))
    return render(out, docs=docs)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.merge:
        return merge([RESULTS / name for name in args.merge.split(",")], out=RESULTS / args.out, docs=not args.no_docs)
    if args.render:
        return render(Path(args.render), docs=not args.no_docs)
    RESULTS.mkdir(exist_ok=True)
    ensure_tools()
    url = db_url(args.dbname)
    if args.reuse_db:
        tokens_file, customer_id = RESULTS / "bench-tokens.txt", _customer_id(url)
    else:
        tokens_file, customer_id = seed(url)
    command = "python -m bench.buckets" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    return run(url, tokens_file, customer_id, args, command=command)


if __name__ == "__main__":
    sys.exit(main())
