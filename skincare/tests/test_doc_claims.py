"""The behaviour-claims guard: what README.md and docs/**/*.md say the system *does* (how many statements and round
trips a checkout sends, which rows each statement writes, which lock it takes when, what one sale-board refresh
runs) is measured here from a real run, so a doc that states something else fails the suite.

A doc states such a behaviour only inside a claim: a marker ``<!-- claim: NAME -->`` on its own line, followed by the
paragraph or table that states it (up to the next blank line). ``NAME`` is one of :data:`CLAIMS`; each kind reads
the stated value from that block and compares it with what the test measured:

- ``checkout.statements``: a table, one row per statement of an unkeyed checkout of one in-stock ``guarded_update``
  product, in order: the statement's constant (backticked ``module.NAME``, compared with the SQL the connection
  ran), the tables it writes rows in (backticked; measured with ``pg_stat_xact_user_tables`` after each statement),
  listed so that a table written from the rows the statement wrote to another table comes after that table (the
  data flow between its data-modifying CTEs, read from ``EXPLAIN (VERBOSE, FORMAT JSON)``), and the lock-order
  steps it takes (links to the steps of docs/locking.md; measured from a second connection: ``pg_locks`` for
  advisory keys, ``FOR UPDATE NOWAIT`` for row locks). The statements are seen by ``connection.execute_wrapper``.
- ``checkout.round-trips``: the first number in the block is the round trips of the same checkout on a connection
  that has run it before (prepared statements on): the ``Query`` and ``Sync`` messages of a libpq trace.
- ``saleboard.statements``: the block's first two numbers in bold are the statements one sale-board refresh runs
  inside its REPEATABLE READ transaction, then the statements it runs after it per product shown.
- ``queue.poll-statements``: the block's first two numbers in bold are the statements a process runs for the first
  polls with signed passes after an opening (passes signed before it, each polled once, by a process that read
  nothing since), then the statements of their next polls while the counters are fresh.

And no behaviour sentence escapes: a sentence of README.md or docs/**/*.md (the benchmark page's measurements aside)
that counts statements, SELECTs, queries or round trips, or puts the ledger rows first or last, must stand inside a
claim (:data:`UNCLAIMED`). Each rule has a control that feeds it a wrong doc.
"""

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.db import connection, transaction

from backoffice import saleboard
from checkout.testing import place
from inventory.models import StockBucket
from skincare.locks import ADVISORY_KEY_SPACES, advisory_key
from waitingroom import counters, selectors, services
from waitingroom.passtoken import SignedPass
from waitingroom.testing import queue_product, reset_queue_clock, sale_starts_in

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# The benchmark page reports measurements (its table is written by ``make bench``), not behaviours of the service.
DESCRIBING = [doc for doc in DOCS if doc.name != "benchmarks.md"]

MARKER = re.compile(r"^<!-- claim: ([\w.-]+) -->\n(.*?)(?:\n\n|\Z)", re.M | re.S)
NUMBER_WORDS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"]
NUMBER = rf"(?:\d+|{'|'.join(NUMBER_WORDS)})"
# Sentences that state a measured behaviour: a count of statements / SELECTs / queries / round trips, or where the
# ledger row is written relative to other writes or locks.
UNCLAIMED = [
    re.compile(rf"\b{NUMBER}\s+(?:[\w-]+\s+)?(?:statements?|SELECTs?|quer(?:y|ies)|round trips?)\b", re.I),
    re.compile(r"\bledger rows? (?:\w+ )?(?:first|last)\b", re.I),
    re.compile(r"\b(?:after|before) (?:\w+ ){0,3}ledger rows?\b", re.I),
]
FENCE = re.compile(r"^```[^\n]*\n.*?^```", re.S | re.M)
# The steps of the lock order (docs/locking.md) a probe below can see held, by their heading's anchor.
STEP_CUSTOMER = "step-3-the-customers-checkout-lock"
STEP_PRODUCT_KEYS = "step-7-product-keys-and-product-rows"
STEP_STOCK_ROWS = "step-8-stock-rows"


def number(word: str) -> int:
    return int(word) if word.isdigit() else NUMBER_WORDS.index(word.lower()) + 1


def claims(text: str) -> Iterator[tuple[str, str]]:
    """(claim name, the block that states it) for every marker of a doc."""
    for match in MARKER.finditer(text):
        yield match.group(1), match.group(2)


def unclaimed_sentences(text: str, *, name: str) -> list[str]:
    """The behaviour sentences of a doc that no claim holds."""
    held = [(m.start(), m.end()) for m in MARKER.finditer(text)]
    found: dict[str, int] = {}  # sentence -> its first line
    for pattern in UNCLAIMED:
        for match in pattern.finditer(FENCE.sub(lambda m: " " * len(m.group(0)), text)):
            if any(start <= match.start() < end for start, end in held):
                continue
            line = text.count("\n", 0, match.start()) + 1
            sentence = sentence_at(text, match.start())
            found[sentence] = min(line, found.get(sentence, line))
    return [
        f"{name}:{line}: a behaviour no test holds: {sentence!r}"
        for sentence, line in sorted(found.items(), key=lambda item: item[1])
    ]


def sentence_at(text: str, at: int) -> str:
    start = max(text.rfind(". ", 0, at), text.rfind("\n\n", 0, at), text.rfind("\n|", 0, at)) + 1
    end = min(e for e in (text.find(". ", at), text.find("\n\n", at), text.find("|", at), len(text)) if e != -1)
    return " ".join(text[start : end + 1].split())[:240]


# What the docs state, read from a claim's block.


@dataclass(frozen=True)
class Statement:
    sql: str  # the constant's name, module.NAME
    writes: tuple[str, ...]  # as stated; measured: sorted
    locks: tuple[str, ...]  # step anchors
    written_from: frozenset[tuple[str, str]] = frozenset()  # measured: (a, b) when b is written from a's rows


def stated_statements(block: str) -> list[Statement]:
    rows = [line for line in block.splitlines() if line.startswith("|")][2:]  # after the header and its rule
    stated = []
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        name, writes, locks = cells[-3:]
        stated.append(
            Statement(
                sql=re.findall(r"`([\w.]+)`", name)[0],
                writes=tuple(re.findall(r"`(\w+)`", writes)),
                locks=tuple(re.findall(r"\]\([^)#]*#([\w-]+)\)", locks)),
            )
        )
    return stated


def stated_number(block: str, noun: str) -> int:
    found = re.search(rf"\b({NUMBER})\s+(?:[\w-]+\s+)?{noun}", block, re.I)
    assert found, f"no count of {noun} in: {block!r}"
    return number(found.group(1))


def stated_bold_numbers(block: str) -> list[int]:
    return [number(n) for n in re.findall(rf"\*\*({NUMBER})\*\*", block, re.I)]


# What the system does, measured.


def constant(dotted: str) -> str:
    module, _, attr = dotted.rpartition(".")
    return getattr(__import__(module, fromlist=[attr]), attr)


def second_connection() -> psycopg.Connection:
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("prepare_threshold", None)
    return psycopg.connect(**params, autocommit=True)


def written_counts() -> dict[str, int]:
    """Rows this transaction has inserted, updated or deleted so far, by table (read on the same connection)."""
    rows = connection.connection.execute(
        "SELECT relname, n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_xact_user_tables"
    ).fetchall()
    return {table: n for table, n in rows if n}


def advisory_spaces_held(other: psycopg.Connection, pid: int) -> set[str]:
    keys = other.execute(
        "SELECT (classid::bigint << 32) | objid::bigint FROM pg_locks"
        " WHERE locktype = 'advisory' AND pid = %s AND granted",
        [pid],
    ).fetchall()
    names = {space: name for name, space in ADVISORY_KEY_SPACES.items()}
    return {names[key >> 47] for (key,) in keys}


def stock_rows_held(other: psycopg.Connection, product_id: int) -> bool:
    try:
        with other.transaction():
            other.execute("SELECT 1 FROM stock_buckets WHERE product_id = %s FOR UPDATE NOWAIT", [product_id])
    except psycopg.errors.LockNotAvailable:
        return True
    return False


def locks_held(other: psycopg.Connection, pid: int, product_id: int) -> set[str]:
    held = set()
    spaces = advisory_spaces_held(other, pid)
    if "customer_checkout" in spaces:
        held.add(STEP_CUSTOMER)
    if "inventory_product" in spaces:
        held.add(STEP_PRODUCT_KEYS)
    if stock_rows_held(other, product_id):
        held.add(STEP_STOCK_ROWS)
    return held


def written_from(plan: dict[str, Any]) -> frozenset[tuple[str, str]]:
    """(a, b) for every table b that a statement writes from the rows it wrote to table a: b's data-modifying CTE
    reads a's (directly or through other CTEs), so PostgreSQL cannot write b's rows before a's."""
    root = plan["Plan"]
    ctes: dict[str, tuple[str | None, set[str]]] = {}  # CTE name -> (the table it writes, the CTEs it reads)
    for child in root.get("Plans", []):
        name = child.get("Subplan Name", "")
        if name.startswith("CTE "):
            table = child.get("Relation Name") if child["Node Type"] == "ModifyTable" else None
            ctes[name.removeprefix("CTE ")] = (table, set(cte_scans(child)))
    main = {k: v for k, v in root.items() if k != "Plans"}
    main["Plans"] = [c for c in root.get("Plans", []) if not c.get("Subplan Name", "").startswith("CTE ")]
    top = root.get("Relation Name") if root["Node Type"] == "ModifyTable" else None
    ctes[""] = (top, set(cte_scans(main)))

    def upstream(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
        found: set[str] = set()
        for read in ctes[name][1] - seen:
            table = ctes[read][0]
            found |= ({table} if table else set()) | upstream(read, seen | {name})
        return found

    return frozenset((a, b) for name, (b, _) in ctes.items() if b for a in upstream(name) if a != b)


def cte_scans(node: dict[str, Any]) -> Iterator[str]:
    if node.get("Node Type") == "CTE Scan":
        yield node["CTE Name"]
    for child in node.get("Plans", []):
        yield from cte_scans(child)


def statement_name(sql: str, names: list[str]) -> str:
    for name in names:
        if constant(name).strip() == sql.strip():
            return name
    return f"an unnamed statement: {' '.join(sql.split())[:80]!r}"


def measured_statements(*, product_id: int, customer: Any, names: list[str]) -> list[Statement]:
    """Run one checkout of one unit; after each statement, what it wrote and which locks it took (held now, not
    before)."""
    measured: list[Statement] = []
    connection.ensure_connection()
    with second_connection() as other:
        pid = connection.connection.info.backend_pid
        state = {"written": written_counts(), "held": locks_held(other, pid, product_id)}

        def watch(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
            result = execute(sql, params, many, context)
            written, held = written_counts(), locks_held(other, pid, product_id)
            new_rows = {t for t, n in written.items() if n > state["written"].get(t, 0)}
            flow: frozenset[tuple[str, str]] = frozenset()
            if new_rows:
                plan = connection.connection.execute(f"EXPLAIN (VERBOSE, FORMAT JSON) {sql}", params).fetchone()
                flow = written_from(plan[0][0])
            measured.append(
                Statement(
                    sql=statement_name(sql, names),
                    writes=tuple(sorted(new_rows)),
                    locks=tuple(sorted(held - state["held"])),
                    written_from=flow,
                )
            )
            state.update(written=written, held=held)
            return result

        with connection.execute_wrapper(watch):
            place(customer=customer, items=[(product_id, 1)])
    return measured


@contextmanager
def libpq_trace(path: Path) -> Iterator[None]:
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    with path.open("w") as out:
        pgconn.trace(out.fileno())
        try:
            yield
        finally:
            pgconn.untrace()


def round_trips(trace: str) -> int:
    """Each ``Query`` (simple protocol) and each ``Sync`` (extended protocol) the client sent waits for the server's
    answer: one round trip each."""
    return sum(1 for line in trace.splitlines() if re.match(r"^\S+ \S+\tF\t\d+\t(?:Query|Sync)\b", line))


def measured_round_trips(*, product_id: int, make_customer: Callable[..., Any], tmp_path: Path) -> int:
    for _ in range(6):  # psycopg prepares a statement on its fifth run; then each is one Bind/Execute/Sync
        place(customer=make_customer(), items=[(product_id, 1)])
    customer = make_customer()
    with libpq_trace(tmp_path / "trace"):
        place(customer=customer, items=[(product_id, 1)])
    return round_trips((tmp_path / "trace").read_text())


def measured_board(shown: int) -> tuple[int, int]:
    """(statements inside the refresh's transaction, statements after it) of one sale-board refresh."""
    inside = after = 0

    def count(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        nonlocal inside, after
        if connection.in_atomic_block:
            inside += 1
        else:
            after += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        shown_now = len(saleboard.board()["products"])
    assert shown_now == shown
    return inside, after


def measured_queue_polls(*, product: Any, customers: list[Any]) -> tuple[int, int]:
    """(statements of the first polls after the opening, statements of the next polls) of ``customers``' passes,
    joined before the opening, each polled once with what its join signed (no position) and once more with its
    position (as the re-signed pass carries it)."""
    queue_product(product, pace=1, starts_in=60)
    joined = [services.queue_join(customer=c, product_id=product.pk)[0] for c in customers]
    signed = [
        SignedPass(p.pass_id, product.pk, c.pk, p.position, p.queue_created_us)
        for p, c in zip(joined, customers, strict=True)
    ]
    assert {s.position for s in signed} == {None}
    sale_starts_in(product, -1)
    reset_queue_clock(product)
    assert services.queue_advance(product_id=product.pk).admitted == 0  # everyone placed, nobody admitted
    counters.queue_counters_forget()
    first, placed = count_statements(lambda: [selectors.pass_poll(signed=s) for s in signed])
    assert sorted(p.position for p in placed) == list(range(1, len(customers) + 1))
    again = [
        SignedPass(s.pass_id, product.pk, s.customer_id, p.position, s.queue_created_us)
        for s, p in zip(signed, placed, strict=True)
    ]
    next_polls, _ = count_statements(lambda: [selectors.pass_poll(signed=s) for s in again])
    return first, next_polls


def count_statements(run: Callable[[], Any]) -> tuple[int, Any]:
    n = 0

    def count(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        nonlocal n
        n += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        result = run()
    return n, result


# The comparison of one doc's claims with the measured values.


@dataclass
class Measured:
    statements: list[Statement]
    round_trips: int
    board: tuple[int, int]  # inside the transaction, after it per product shown
    queue_polls: tuple[int, int]  # the first polls after an opening, in all; the next ones


def claim_problems(text: str, *, name: str, measured: Measured) -> list[str]:
    found: list[str] = []
    for claim, block in claims(text):
        where = f"{name}: claim {claim}"
        if claim == "checkout.statements":
            stated = stated_statements(block)
            if len(stated) != len(measured.statements):
                found.append(f"{where}: states {len(stated)} statements, a checkout runs {len(measured.statements)}")
            for n, (says, does) in enumerate(zip(stated, measured.statements, strict=False), start=1):
                if says.sql != does.sql:
                    found.append(f"{where}: statement {n} is {does.sql}, not {says.sql}")
                if sorted(says.writes) != list(does.writes):
                    found.append(f"{where}: statement {n} writes {list(does.writes)}, not {list(says.writes)}")
                found += [
                    f"{where}: statement {n} writes {b} from the rows it wrote to {a}: {a} comes first"
                    for a, b in sorted(does.written_from)
                    if a in says.writes and b in says.writes and says.writes.index(b) < says.writes.index(a)
                ]
                if set(says.locks) != set(does.locks):
                    found.append(f"{where}: statement {n} takes {sorted(does.locks)}, not {sorted(says.locks)}")
        elif claim == "checkout.round-trips":
            says_trips = stated_number(block, "round trips?")
            if says_trips != measured.round_trips:
                found.append(f"{where}: states {says_trips} round trips, a checkout makes {measured.round_trips}")
        elif claim == "saleboard.statements":
            says_board = tuple(stated_bold_numbers(block)[:2])
            if says_board != measured.board:
                found.append(
                    f"{where}: states {says_board} (in the transaction, after it per product), "
                    f"a refresh runs {measured.board}"
                )
        elif claim == "queue.poll-statements":
            says_polls = tuple(stated_bold_numbers(block)[:2])
            if says_polls != measured.queue_polls:
                found.append(
                    f"{where}: states {says_polls} (the first polls after an opening, the next ones), "
                    f"the polls run {measured.queue_polls}"
                )
        else:
            found.append(f"{where}: no such claim (one of {', '.join(CLAIMS)})")
    return found


CLAIMS = ("checkout.statements", "checkout.round-trips", "saleboard.statements", "queue.poll-statements")


@pytest.fixture
def measured(make_product, make_customer, tmp_path) -> Measured:
    assert settings.DB_PREPARED_STATEMENTS, "the docs state a checkout connected directly (prepared statements on)"
    product = make_product(stock=100)
    names = [
        name
        for doc in DOCS
        for c, block in claims(doc.read_text())
        if c == "checkout.statements"
        for name in (s.sql for s in stated_statements(block))
    ]
    statements = measured_statements(product_id=product.pk, customer=make_customer(), names=names)
    trips = measured_round_trips(product_id=product.pk, make_customer=make_customer, tmp_path=tmp_path)
    # The board shows the product (units held by unpaid orders); then one more product.
    one = measured_board(shown=1)
    place(customer=make_customer(), items=[(make_product(stock=5).pk, 1)])
    two = measured_board(shown=2)
    assert one[0] == two[0], (one, two)  # the transaction's statements do not grow with the products
    # An opening of 40 passes signed before it, then of 80: the first polls cost the same whatever the crowd.
    polls = [
        measured_queue_polls(product=make_product(stock=100), customers=[make_customer() for _ in range(n)])
        for n in (40, 80)
    ]
    assert polls[0] == polls[1], polls
    return Measured(statements=statements, round_trips=trips, board=(one[0], two[1] - one[1]), queue_polls=polls[0])


@pytest.mark.django_db(transaction=True)
def test_every_claim_of_the_docs_is_what_the_system_does(measured: Measured) -> None:
    found = [
        p for doc in DOCS for p in claim_problems(doc.read_text(), name=str(doc.relative_to(ROOT)), measured=measured)
    ]
    assert not found, "\n".join(found)


@pytest.mark.django_db(transaction=True)
def test_the_order_of_writes_is_measured(measured: Measured) -> None:
    """The premise of the order rule: a real checkout has a statement that writes one table from the rows it wrote to
    another (else every stated order would pass)."""
    assert any(statement.written_from for statement in measured.statements), measured.statements


def test_every_claim_kind_is_stated_somewhere() -> None:
    stated = {claim for doc in DOCS for claim, _ in claims(doc.read_text())}
    assert stated == set(CLAIMS)


def test_no_behaviour_sentence_escapes_a_claim() -> None:
    found = [p for doc in DESCRIBING for p in unclaimed_sentences(doc.read_text(), name=str(doc.relative_to(ROOT)))]
    assert not found, "\n".join(found)


@pytest.mark.django_db(transaction=True)
def test_the_probes_see_the_locks_they_name(make_product) -> None:
    """The premise of the lock column: a row lock and an advisory key this transaction holds are seen from the second
    connection, and nothing once it committed."""
    product = make_product(stock=3)
    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    with second_connection() as other:
        assert locks_held(other, pid, product.pk) == set()
        with transaction.atomic():
            StockBucket.objects.filter(product_id=product.pk).update(version=1)
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [advisory_key("customer_checkout", 7)])
            assert locks_held(other, pid, product.pk) == {STEP_CUSTOMER, STEP_STOCK_ROWS}
        assert locks_held(other, pid, product.pk) == set()


# Controls: each kind refuses a doc that states something else.

TRUE = Measured(
    statements=[
        Statement("skincare.db.GENERIC_PLANS_SQL", (), ()),
        Statement("checkout.services.QUOTES_SQL", (), (STEP_CUSTOMER,)),
        Statement("checkout.services.ORDER_SQL", ("order_lines", "orders"), (), frozenset({("orders", "order_lines")})),
        Statement(
            "inventory.reserve.RESERVE_SQL",
            ("stock_buckets", "stock_movements"),
            (STEP_STOCK_ROWS,),
            frozenset({("stock_buckets", "stock_movements")}),
        ),
    ],
    round_trips=6,
    board=(6, 1),
    queue_polls=(2, 0),
)
TABLE = f"""<!-- claim: checkout.statements -->
| # | statement | writes | locks |
|---|---|---|---|
| 1 | `skincare.db.GENERIC_PLANS_SQL` | - | - |
| 2 | `checkout.services.QUOTES_SQL` | - | [customer](locking.md#{STEP_CUSTOMER}) |
| 3 | `checkout.services.ORDER_SQL` | `orders`, `order_lines` | - |
| 4 | `inventory.reserve.RESERVE_SQL` | `stock_buckets`, `stock_movements` | [stock](locking.md#{STEP_STOCK_ROWS}) |
"""


def test_control_a_true_doc_passes() -> None:
    doc = (
        f"# Control\n\n{TABLE}\n"
        "<!-- claim: checkout.round-trips -->\nA checkout is six round trips.\n\n"
        "<!-- claim: saleboard.statements -->\nA refresh runs **6** statements, then **1** per product.\n\n"
        "<!-- claim: queue.poll-statements -->\nThe first polls run **2** statements in all, then **0** each.\n"
    )
    assert claim_problems(doc, name="docs/control.md", measured=TRUE) == []
    assert unclaimed_sentences(doc, name="docs/control.md") == []


@pytest.mark.parametrize(
    "wrong, complaint",
    [
        # the README's old order of writes: the ledger row in the statement that writes the order
        (
            TABLE.replace("`orders`, `order_lines` |", "`orders`, `order_lines`, `stock_movements` |").replace(
                "`stock_buckets`, `stock_movements` |", "`stock_buckets` |"
            ),
            "statement 3 writes ['order_lines', 'orders'], not ['orders', 'order_lines', 'stock_movements']",
        ),
        (
            TABLE.replace("`stock_buckets`, `stock_movements`", "`stock_movements`, `stock_buckets`"),
            "statement 4 writes stock_movements from the rows it wrote to stock_buckets: stock_buckets comes first",
        ),
        (
            TABLE.replace("| 1 | `skincare.db.GENERIC_PLANS_SQL` | - | - |\n", ""),
            "states 3 statements, a checkout runs 4",
        ),
        (
            TABLE.replace("`checkout.services.QUOTES_SQL`", "`checkout.services.ORDER_SQL`"),
            "statement 2 is checkout.services.QUOTES_SQL, not checkout.services.ORDER_SQL",
        ),
        (
            TABLE.replace(f"[customer](locking.md#{STEP_CUSTOMER})", "-"),
            f"statement 2 takes ['{STEP_CUSTOMER}'], not []",
        ),
        ("<!-- claim: checkout.round-trips -->\nA checkout is 4 round trips.\n", "states 4 round trips"),
        ("<!-- claim: saleboard.statements -->\nA refresh runs **4** statements, then **0**.\n", "states (4, 0)"),
        ("<!-- claim: queue.poll-statements -->\nThe first polls run **1** statement, then **0**.\n", "states (1, 0)"),
        ("<!-- claim: checkout.latency -->\nFast.\n", "no such claim"),
    ],
)
def test_control_a_wrong_claim_fails(wrong: str, complaint: str) -> None:
    found = claim_problems(f"# Control\n\n{wrong}\n", name="docs/control.md", measured=TRUE)
    assert any(complaint in problem for problem in found), found


@pytest.mark.parametrize(
    "sentence",
    [
        "It inserts the order, its lines, its reservation rows and the ledger rows first, and reserves stock last.",
        "One refresh is four SELECTs in one snapshot.",
        "The lock rides in the quote: no extra round trip, and 3 statements in all.",
    ],
)
def test_control_an_unclaimed_behaviour_sentence_fails(sentence: str) -> None:
    assert unclaimed_sentences(f"# Control\n\n{sentence}\n", name="docs/control.md")
