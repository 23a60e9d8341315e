"""The migration guard: refuses a migration that would rewrite, long-lock or bulk-write a table that already has rows.

A migration runs while the shop sells (docs/runbooks/deploys.md#apply-a-migration-during-a-sale). Every statement on a
table that existed before the migration must take its lock only for a moment; what takes an ``ACCESS EXCLUSIVE`` (or
``SHARE``) lock for as long as the table is long stops every checkout that touches the table for that long:

- ``CREATE INDEX`` / ``REINDEX`` without ``CONCURRENTLY`` (and ``ADD [CONSTRAINT ...] UNIQUE / PRIMARY KEY`` without
  ``USING INDEX``, an inline ``UNIQUE`` / ``PRIMARY KEY`` on an added column: the same index build under the lock);
- ``ADD [COLUMN]`` with a volatile default, a stored generated column or an identity/serial (every row rewritten);
- ``ALTER COLUMN ... TYPE`` (a rewrite, or at least a scan, under ``ACCESS EXCLUSIVE``);
- a validating constraint: ``ADD [CONSTRAINT ...] CHECK / FOREIGN KEY`` without ``NOT VALID`` (add it ``NOT VALID``,
  then ``VALIDATE CONSTRAINT`` in its own statement), ``SET NOT NULL``, an inline ``CHECK`` / ``REFERENCES`` on an
  added column;
- whole-table rewrites and locks: ``VACUUM FULL`` (or ``VACUUM (FULL)``), ``CLUSTER``, ``SET TABLESPACE``,
  ``SET LOGGED / UNLOGGED``, ``LOCK TABLE``, ``TRUNCATE``;
- data changes: an ``UPDATE`` / ``DELETE`` / ``MERGE`` / ``INSERT ... SELECT`` / ``COPY ... FROM`` on an existing
  table (a ``WITH`` in front included), every ``RunPython`` except the two shapes of :mod:`skincare.data_migrations`
  (in batches, or refused above a stated table size), and code the guard cannot read (``DO`` blocks, ``CALL``).

Tables created earlier in the same migration are empty: anything goes on them.

The SQL is read by a small tokenizer (:func:`tokens`): comments are dropped, string literals and dollar-quoted
bodies become one opaque token, keywords are upper-cased and whitespace is one space, so a rule matches the statement
PostgreSQL would run however it is spelled. It is the SQL Django would send (``sqlmigrate``'s, RunSQL included),
collected by :func:`migration_sql` without executing anything: a Python operation is never called (it is reported
instead, as ``sqlmigrate`` marks it), and while collecting, the connection refuses every statement but a ``SELECT``
(Django's schema editor reads the catalogue; nothing may write).

Migrations applied before the guard existed and that break a rule are listed by name in ``GRANDFATHERED``, each with
why it was acceptable then; ``skincare/tests/test_migration_guard.py`` fails for any other, and for a listed one that
no longer breaks a rule (the list only shrinks).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

# The project's own apps (the guard's scope; Django's and third-party apps' migrations are not ours to change).
PROJECT_APPS = ("skincare", "inventory", "orders", "payments", "carts", "checkout", "waitingroom", "backoffice")

# Applied before the guard, each breaking a rule on a table that existed then (all ran before the first sale, on
# small tables). A new migration is never added here: it is written the safe way.
GRANDFATHERED: dict[tuple[str, str], str] = {
    ("inventory", "0003_product_inventory_strategy"): "validating CHECK on products (catalogue table, before sales)",
    ("inventory", "0004_product_max_per_customer"): "inline CHECK and validating CHECK on products",
    ("inventory", "0005_product_sale_window"): "validating CHECKs on products",
    ("inventory", "0006_stock_buckets"): "stock rows split into stock_buckets: CHECKs on products and stock_movements",
    ("inventory", "0007_stock_buckets_fillfactor"): "VACUUM FULL stock_buckets (a few hundred rows then)",
    ("orders", "0002_orders_customer_pending_idx"): "index on orders built without CONCURRENTLY",
    ("orders", "0003_reservation_bucket"): "reservations' bucket back-filled and SET NOT NULL",
    ("orders", "0004_order_currency"): "validating CHECK on orders",
    ("orders", "0006_order_currency_from_setting"): "RunPython re-stamping orders, in batches of 1000 by hand",
    ("payments", "0002_idempotency_keys"): "index on processed_events built without CONCURRENTLY",
    ("payments", "0003_payment_currency"): "index and validating CHECK on payment_attempts",
    ("skincare", "0003_hash_legacy_drf_tokens"): "RunPython copying the legacy token table (before the first sale)",
}

# Functions a column default may call without making it volatile (PostgreSQL evaluates them once per statement).
STABLE_DEFAULT_FUNCTIONS = frozenset({"now", "statement_timestamp", "transaction_timestamp", "current_timestamp"})
# SQL's own forms that look like calls; what they wrap is looked at on its own.
NOT_FUNCTIONS = frozenset({"cast", "coalesce", "nullif", "greatest", "least", "row", "array"})

# Django's line, in sqlmigrate's output and in migration_sql's, for an operation that is Python, not SQL.
NOT_SQL_MARKER = "-- THIS OPERATION CANNOT BE WRITTEN AS SQL"
# How the two safe Python shapes (skincare.data_migrations) describe themselves, the line before the marker.
SAFE_PYTHON_PREFIXES = ("-- Data migration in batches", "-- Data migration on a small table")

_TOKEN = re.compile(
    r"""
      (?P<space>\s+)
    | (?P<line_comment>--[^\n]*)
    | (?P<block_comment>/\*)
    | (?P<string>[EeBbXxNnUu]?&?'(?:[^']|'')*')
    | (?P<dollar>\$(?P<tag>[A-Za-z_][A-Za-z0-9_]*)?\$)
    | (?P<name>"(?:[^"]|"")*")
    | (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
    | (?P<number>[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)
    | (?P<op>::|[^\sA-Za-z0-9_])
    """,
    re.X,
)
STRING = "'…'"  # every string literal and dollar-quoted body, as one token


def tokens(sql: str) -> list[str]:
    """``sql`` as PostgreSQL's lexer sees it, minus comments: keywords and names upper-cased (a quoted name keeps
    its quotes and case), each string literal or dollar-quoted body one :data:`STRING` token, punctuation one token
    each (``::`` one). Backslash escapes in ``E'...'`` are honoured; block comments nest, as PostgreSQL's do."""
    found: list[str] = []
    pos = 0
    while pos < len(sql):
        match = _TOKEN.match(sql, pos)
        if match is None:  # an unterminated literal: the rest is opaque
            found.append(STRING)
            break
        kind, pos = match.lastgroup, match.end()
        if kind == "block_comment":
            depth = 1
            while depth and pos < len(sql):
                if sql.startswith("/*", pos):
                    depth, pos = depth + 1, pos + 2
                elif sql.startswith("*/", pos):
                    depth, pos = depth - 1, pos + 2
                else:
                    pos += 1
        elif kind == "dollar":
            end = sql.find(match.group("dollar"), pos)
            pos = len(sql) if end < 0 else end + len(match.group("dollar"))
            found.append(STRING)
        elif kind == "string":
            if match.group()[0] in "Ee":  # E'...': a backslash escapes the next character, a quote included
                escaped = re.compile(r"'(?:[^'\\]|\\.|'')*'", re.S).match(sql, match.start() + 1)
                pos = escaped.end() if escaped else len(sql)
            found.append(STRING)
        elif kind in ("word", "number", "op"):
            found.append(match.group().upper())
        elif kind == "name":
            found.append(match.group())
        # space and line comments are dropped; tag is part of dollar
    return found


def statements(sql_chunks: list[str]) -> list[list[str]]:
    """The single statements (token lists, :func:`tokens`) in Django's collected SQL or ``sqlmigrate``'s output (a
    chunk may hold several; BEGIN/COMMIT are left out)."""
    found: list[list[str]] = []
    for chunk in sql_chunks:
        current: list[str] = []
        for piece in [*tokens(chunk), ";"]:
            if piece != ";":
                current.append(piece)
            elif current and current not in (["BEGIN"], ["COMMIT"]):
                found.append(current)
                current = []
            else:
                current = []
    return found


def text(statement: list[str]) -> str:
    return " ".join(statement)


def table_name(token: str) -> str:
    """A table's name as the guard compares it: unquoted, lower case, without its schema."""
    return token.strip('"').lower()


def _name_at(statement: list[str], index: int) -> tuple[str, int]:
    """The (possibly schema-qualified) name starting at ``statement[index]`` and the index after it."""
    name = statement[index] if index < len(statement) else ""
    index += 1
    while index + 1 < len(statement) and statement[index] == ".":
        name, index = statement[index + 1], index + 2
    return table_name(name), index


def _skip(statement: list[str], index: int, *phrases: str) -> int:
    """``index`` moved past each of the optional ``phrases`` that comes next, in this order (``"IF NOT EXISTS"``)."""
    for phrase in phrases:
        words = phrase.split()
        if statement[index : index + len(words)] == words:
            index += len(words)
    return index


def _split_top_level(statement: list[str], separator: str = ",") -> list[list[str]]:
    """``statement`` cut at each ``separator`` outside parentheses."""
    parts: list[list[str]] = [[]]
    depth = 0
    for token in statement:
        depth += {"(": 1, ")": -1}.get(token, 0)
        if token == separator and depth == 0:
            parts.append([])
        else:
            parts[-1].append(token)
    return [part for part in parts if part]


def _has(statement: list[str], *words: str) -> bool:
    """Whether ``words`` occur in ``statement`` one after another."""
    n = len(words)
    return any(statement[i : i + n] == list(words) for i in range(len(statement) - n + 1))


@dataclass(frozen=True)
class Finding:
    """One statement (or operation) that would rewrite, long-lock or bulk-write ``table``, and which rule it
    breaks."""

    table: str
    rule: str
    statement: str

    def __str__(self) -> str:
        return f"{self.rule} on {self.table}: {self.statement[:200]}"


INDEX_BUILD = "index built without CONCURRENTLY"
VALIDATING = "validating constraint"
VOLATILE = "column with a volatile default"
REWRITE = "table rewrite or lock"
DATA_CHANGE = "data change of an existing table in a migration"
PYTHON = "data migration in Python (RunPython, neither batched nor bounded: skincare.data_migrations)"
UNREADABLE = "code the guard cannot read"


def _default_is_volatile(column: list[str]) -> bool:
    """Whether the ``DEFAULT`` expression of a column definition calls a function other than the stable ones."""
    if "DEFAULT" not in column:
        return False
    expression = column[column.index("DEFAULT") + 1 :]
    depth = 0
    for i, token in enumerate(expression):
        depth += {"(": 1, ")": -1}.get(token, 0)
        if depth == 0 and token in ("NOT", "NULL", "CONSTRAINT", "CHECK", "REFERENCES", "UNIQUE", "PRIMARY"):
            expression = expression[:i]
            break
    called = set()
    for i, token in enumerate(expression[:-1]):
        if expression[i + 1] != "(" or not (token[0].isalpha() or token[0] in '_"'):
            continue
        if i and expression[i - 1] in ("::", "AS"):  # a type's (precision, scale): '0'::numeric(12, 2)
            continue
        called.add(token.strip('"').lower())
    return bool(called - STABLE_DEFAULT_FUNCTIONS - NOT_FUNCTIONS)


def _column_rules(column: list[str]) -> list[str]:
    """The rules an added column's definition (after ``ADD [COLUMN] [IF NOT EXISTS]``) breaks."""
    rules: list[str] = []
    types = set(column[1:3])
    if (_has(column, "GENERATED") and (_has(column, "STORED") or _has(column, "AS", "IDENTITY"))) or types & {
        "SERIAL",
        "BIGSERIAL",
        "SMALLSERIAL",
        "SERIAL4",
        "SERIAL8",
        "SERIAL2",
    }:
        rules.append(f"{VOLATILE} (generated, identity or serial: every row rewritten)")
    elif _default_is_volatile(column):
        rules.append(f"{VOLATILE} (every row rewritten)")
    if "CHECK" in column or "REFERENCES" in column:
        rules.append(f"{VALIDATING} (inline CHECK / REFERENCES on an added column)")
    if "UNIQUE" in column or _has(column, "PRIMARY", "KEY"):
        rules.append(f"{INDEX_BUILD} (an inline UNIQUE / PRIMARY KEY builds its index)")
    return rules


CONSTRAINT_KINDS = ("CHECK", "FOREIGN", "UNIQUE", "PRIMARY", "EXCLUDE")


def _constraint_rules(constraint: list[str]) -> list[str]:
    """The rules a table constraint (after ``ADD [CONSTRAINT name]``) breaks."""
    if constraint[0] in ("CHECK", "FOREIGN") and not _has(constraint, "NOT", "VALID"):
        return [f"{VALIDATING} (add it NOT VALID, then VALIDATE CONSTRAINT)"]
    if constraint[0] in ("UNIQUE", "PRIMARY", "EXCLUDE") and not _has(constraint, "USING", "INDEX"):
        return [f"{INDEX_BUILD} (a UNIQUE / PRIMARY KEY / EXCLUDE constraint builds its index)"]
    return []


def _alter_rules(action: list[str]) -> list[str]:
    """The rules one action of ``ALTER TABLE <table> <action>, <action>...`` breaks."""
    if action[0] == "ADD":
        rest = action[1:]
        if rest[:1] == ["CONSTRAINT"]:
            return _constraint_rules(rest[2:])
        if rest[:1] and rest[0] in CONSTRAINT_KINDS:  # unnamed: ADD UNIQUE (...), ADD CHECK (...)
            return _constraint_rules(rest)
        rest = rest[_skip(rest, 0, "COLUMN", "IF NOT EXISTS") :]
        return _column_rules(rest)
    if action[0] == "ALTER":
        if _has(action, "TYPE"):
            return ["type change"]
        if _has(action, "SET", "NOT", "NULL"):
            return [f"{VALIDATING} (SET NOT NULL scans the table under ACCESS EXCLUSIVE)"]
    if action[:2] == ["SET", "TABLESPACE"]:
        return [f"{REWRITE} (SET TABLESPACE rewrites the table)"]
    if action[:2] in (["SET", "LOGGED"], ["SET", "UNLOGGED"]):
        return [f"{REWRITE} (SET LOGGED / UNLOGGED rewrites the table)"]
    return []


def _after_options(statement: list[str], index: int) -> tuple[list[str], int]:
    """A parenthesised option list at ``index`` (``VACUUM (FULL)``, ``REINDEX (VERBOSE)``) and the index after it."""
    if index < len(statement) and statement[index] == "(":
        end = statement.index(")", index) if ")" in statement[index:] else len(statement)
        return statement[index + 1 : end], end + 1
    return [], index


def _option_on(options: list[str], name: str) -> bool:
    """Whether option ``name`` is on in a parenthesised list (``FULL``, ``FULL TRUE``; not ``FULL FALSE``)."""
    for option in _split_top_level(options):
        if option[0] == name:
            return len(option) == 1 or option[1] not in ("FALSE", "OFF", "0")
    return False


WRITE_VERBS = ("UPDATE", "DELETE", "INSERT", "MERGE")
# A write verb after one of these is part of another clause: FOR UPDATE, FOR NO KEY UPDATE, ON CONFLICT DO UPDATE,
# ON UPDATE/DELETE CASCADE, BEFORE UPDATE OR DELETE (a trigger), DO INSTEAD (a rule).
NOT_A_WRITE_AFTER = ("FOR", "KEY", "DO", "ON", "OR", "BEFORE", "AFTER", "OF", "INSTEAD", "ALSO", "MATCHED", "THEN")


def _writes(statement: list[str]) -> list[tuple[str, str]]:
    """Each ``(table, verb)`` a data-changing statement writes: the statement's own verb, or one behind a ``WITH``
    (``WITH moved AS (UPDATE orders ...) SELECT ...``, ``WITH x AS (...) UPDATE orders ...``). An ``INSERT`` counts
    only with a ``SELECT`` (a bulk copy); ``INSERT ... VALUES`` adds rows, it rewrites none."""
    if statement[0] not in (*WRITE_VERBS, "WITH"):
        return []
    found: list[tuple[str, str]] = []
    for i, verb in enumerate(statement):
        if verb not in WRITE_VERBS or (i and statement[i - 1] in NOT_A_WRITE_AFTER):
            continue
        if verb == "INSERT" and "SELECT" not in statement[i:]:
            continue
        name, _ = _name_at(statement, _skip(statement, i + 1, "FROM", "INTO", "ONLY"))
        found.append((name, verb))
    return found


def check_statements(sql: list[str]) -> list[Finding]:
    """Every statement of one migration that would rewrite, long-lock or bulk-write a table that existed before it;
    an operation Django marks as not SQL is one too (unless it is one of the safe shapes)."""
    created: set[str] = set()
    findings: list[Finding] = []

    def add(name: str, rule: str, statement: list[str]) -> None:
        if name not in created:
            findings.append(Finding(name, rule, text(statement)))

    findings += _python_operations("\n".join(sql))
    for statement in statements(sql):
        head = statement[0]
        if head == "CREATE":
            at = _skip(statement, 1, "UNLOGGED", "TEMPORARY")
            if statement[at : at + 1] == ["TABLE"]:
                created.add(_name_at(statement, _skip(statement, at + 1, "IF NOT EXISTS"))[0])
            at = _skip(statement, 1, "UNIQUE")
            if statement[at : at + 1] == ["INDEX"] and "ON" in statement:
                on = statement.index("ON")
                if statement[at + 1] != "CONCURRENTLY":
                    add(_name_at(statement, _skip(statement, on + 1, "ONLY"))[0], INDEX_BUILD, statement)
        elif head == "ALTER" and statement[1:2] == ["TABLE"]:
            at = _skip(statement, 2, "IF EXISTS", "ONLY")
            name, at = _name_at(statement, at)
            for action in _split_top_level(statement[at:]):
                for rule in _alter_rules(action):
                    add(name, rule, statement)
        elif head == "VACUUM":
            options, at = _after_options(statement, 1)
            full = _option_on(options, "FULL") or statement[at : at + 1] == ["FULL"]
            while at < len(statement) and statement[at] in ("FULL", "FREEZE", "VERBOSE", "ANALYZE"):
                at += 1
            if full:
                add(_name_at(statement, at)[0] or "every table", f"{REWRITE} (VACUUM FULL)", statement)
        elif head == "CLUSTER":
            _, at = _after_options(statement, _skip(statement, 1, "VERBOSE"))
            add(_name_at(statement, at)[0] or "every clustered table", f"{REWRITE} (CLUSTER)", statement)
        elif head == "REINDEX":
            options, at = _after_options(statement, 1)
            kind = statement[at] if at < len(statement) else ""
            concurrently = _option_on(options, "CONCURRENTLY") or statement[at + 1 : at + 2] == ["CONCURRENTLY"]
            if not concurrently:
                add(_name_at(statement, at + 1)[0], f"{INDEX_BUILD} (REINDEX {kind})", statement)
        elif head in ("LOCK", "TRUNCATE"):
            at = _skip(statement, 1, "TABLE", "ONLY")
            for target in _split_top_level(statement[at:]):
                add(_name_at(target, 0)[0], f"{REWRITE} ({head})", statement)
        elif head in ("DO", "CALL"):  # a procedural block or procedure: it may write anything
            findings.append(Finding("(unknown: procedural code)", f"{UNREADABLE} ({head})", text(statement)))
        elif head == "COPY" and "FROM" in statement:
            add(_name_at(statement, 1)[0], f"{DATA_CHANGE} (COPY FROM)", statement)
        for name, verb in _writes(statement):
            add(name, f"{DATA_CHANGE} ({verb})", statement)
    return findings


def _python_operations(sql: str) -> list[Finding]:
    """The operations Django marked as not SQL in ``sql`` (the ``-- <description>`` line before the marker), except
    the safe shapes of skincare.data_migrations."""
    findings: list[Finding] = []
    described = ""
    for line in sql.splitlines():
        line = line.strip()
        if line == NOT_SQL_MARKER and not described.startswith(SAFE_PYTHON_PREFIXES):
            findings.append(Finding("(unknown: Python code)", PYTHON, described.lstrip("- ")))
        elif line.startswith("-- ") and line != NOT_SQL_MARKER:
            described = line
    return findings


def _refuse_writes(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
    """While collecting, only a read reaches the database (Django's schema editor reads the catalogue)."""
    if tokens(sql)[:1] != ["SELECT"]:
        raise RuntimeError(f"the migration guard executes nothing while collecting, and was asked: {sql[:200]}")
    return execute(sql, params, many, context)


def _database_operations(operation: Any, from_state: Any, to_state: Any, app: str) -> Iterator[tuple[Any, Any, Any]]:
    """``(operation, from_state, to_state)`` for what ``operation`` does to the database: its own, or each of a
    ``SeparateDatabaseAndState``'s database operations (which Django would run, Python ones included)."""
    inner = getattr(operation, "database_operations", None)
    if inner is None:
        yield operation, from_state, to_state
        return
    for sub in inner:
        after = from_state.clone()
        sub.state_forwards(app, after)
        yield from _database_operations(sub, from_state, after, app)
        from_state = after


def migration_sql(connection: Any, loader: Any, key: tuple[str, str], migration: Any = None) -> list[str]:
    """The SQL Django would send for migration ``key`` (or for ``migration``, a Migration not on disk, applied on
    top of ``key``), collected without executing anything: each Python operation is a comment (``-- <what it
    says it does>`` and :data:`NOT_SQL_MARKER`, as ``sqlmigrate`` writes it), never called."""
    if migration is None:
        migration, state = loader.disk_migrations[key], loader.project_state(key, at_end=False)
    else:
        state = loader.project_state(key, at_end=True)
    with (
        connection.schema_editor(collect_sql=True, atomic=migration.atomic) as editor,
        connection.execute_wrapper(_refuse_writes),
    ):
        for operation in migration.operations:
            before = state.clone()
            operation.state_forwards(migration.app_label, state)
            for database_operation, old, new in _database_operations(operation, before, state, migration.app_label):
                if not database_operation.reduces_to_sql:
                    editor.collected_sql += [f"-- {database_operation.describe()}", NOT_SQL_MARKER]
                    continue
                database_operation.database_forwards(migration.app_label, editor, old, new)
    return list(editor.collected_sql)


def project_findings(connection: Any) -> dict[tuple[str, str], list[Finding]]:
    """Every project migration on disk with what it breaks (those that break nothing are left out)."""
    from django.db.migrations.loader import MigrationLoader

    loader = MigrationLoader(connection)
    found: dict[tuple[str, str], list[Finding]] = {}
    for key in sorted(loader.disk_migrations):
        if key[0] in PROJECT_APPS and (findings := check_statements(migration_sql(connection, loader, key))):
            found[key] = findings
    return found
