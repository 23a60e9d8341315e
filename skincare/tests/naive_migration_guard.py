"""The migration guard's previous matcher, kept as the controls' naive version: regular expressions over the
statement's text (comments dropped only at a line's start, no notion of strings, parentheses or option lists).
skincare/tests/test_migration_guard.py shows each SQL spelling it let through, beside the tokenizing guard that
refuses it."""

import re

STABLE_DEFAULT_FUNCTIONS = frozenset({"now", "statement_timestamp", "transaction_timestamp", "current_timestamp"})

_DOLLAR_QUOTED = re.compile(r"\$([A-Za-z_]*)\$.*?\$\1\$", re.S)
_QUOTED_NAME = r'"?([A-Za-z_][A-Za-z0-9_.]*)"?'
_CREATE_TABLE = re.compile(r"^CREATE\s+(?:UNLOGGED\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?" + _QUOTED_NAME, re.I)
_CREATE_INDEX = re.compile(
    r"^CREATE\s+(UNIQUE\s+)?INDEX\s+(CONCURRENTLY\s+)?(?:IF\s+NOT\s+EXISTS\s+)?(?:\S+\s+)?ON\s+(?:ONLY\s+)?"
    + _QUOTED_NAME,
    re.I,
)
_ALTER_TABLE = re.compile(r"^ALTER\s+TABLE\s+(?:IF\s+EXISTS\s+)?(?:ONLY\s+)?" + _QUOTED_NAME + r"\s+(.*)$", re.I | re.S)
_WRITE = re.compile(r"^(UPDATE|DELETE\s+FROM)\s+(?:ONLY\s+)?" + _QUOTED_NAME, re.I)
_REWRITE = re.compile(r"^(VACUUM\s+FULL|CLUSTER|LOCK\s+TABLE|LOCK)\s+(?:\([^)]*\)\s+)?" + _QUOTED_NAME, re.I)
_FUNCTION_CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*)\s*\(")


def statements(sql_chunks: list[str]) -> list[str]:
    """The single statements in Django's collected SQL or ``sqlmigrate``'s output (a chunk may hold several;
    comments, BEGIN/COMMIT and function bodies are left out)."""
    found: list[str] = []
    for chunk in sql_chunks:
        code = "\n".join(line for line in chunk.splitlines() if not line.lstrip().startswith("--"))
        for statement in _DOLLAR_QUOTED.sub("$$ $$", code).split(";"):
            text = " ".join(statement.split())
            if text and text.upper() not in ("BEGIN", "COMMIT"):
                found.append(text)
    return found


def _default_is_volatile(clause: str) -> bool:
    match = re.search(
        r"\bDEFAULT\b(.*?)(?:\bNOT\s+NULL\b|\bNULL\b|\bCONSTRAINT\b|\bCHECK\b|\bREFERENCES\b|$)", clause, re.I
    )
    if not match:
        return False
    called = {name.lower().rsplit(".", 1)[-1] for name in _FUNCTION_CALL.findall(match.group(1))}
    return bool(called - STABLE_DEFAULT_FUNCTIONS)


def _alter_findings(table: str, action: str) -> list[str]:
    """The rules one ``ALTER TABLE <table> <action>`` breaks (``action`` may hold several comma-separated ones)."""
    rules: list[str] = []
    upper = action.upper()
    if re.search(r"\bALTER\s+(COLUMN\s+)?\S+\s+(SET\s+DATA\s+)?TYPE\b", upper):
        rules.append("type change")
    if re.search(r"\bSET\s+NOT\s+NULL\b", upper):
        rules.append("validating constraint (SET NOT NULL scans the table under ACCESS EXCLUSIVE)")
    if re.search(r"\bSET\s+TABLESPACE\b", upper):
        rules.append("table rewrite (SET TABLESPACE)")
    for column in re.findall(r"\bADD\s+(?:COLUMN\s+)(.*?)(?=,\s*ADD\b|$)", action, re.I | re.S):
        col = column.upper()
        if re.search(r"\bGENERATED\b.*\bSTORED\b|\bGENERATED\b.*\bAS\s+IDENTITY\b|\b(BIG|SMALL)?SERIAL\b", col):
            rules.append("column with a volatile default (generated, identity or serial: every row rewritten)")
        elif _default_is_volatile(column):
            rules.append("column with a volatile default (every row rewritten)")
        if re.search(r"\bCHECK\b|\bREFERENCES\b", col):
            rules.append("validating constraint (inline CHECK / REFERENCES on an added column)")
    for constraint in re.findall(r"\bADD\s+CONSTRAINT\s+\S+\s+(.*?)(?=,\s*ADD\b|$)", action, re.I | re.S):
        con = constraint.upper()
        if re.match(r"(CHECK|FOREIGN\s+KEY)\b", con) and not re.search(r"\bNOT\s+VALID\b", con):
            rules.append("validating constraint (add it NOT VALID, then VALIDATE CONSTRAINT)")
        elif re.match(r"(UNIQUE|PRIMARY\s+KEY|EXCLUDE)\b", con) and "USING INDEX" not in con:
            rules.append("index built without CONCURRENTLY (a UNIQUE / PRIMARY KEY constraint builds its index)")
    return rules


def check_statements(sql: list[str]) -> list[tuple[str, str]]:
    """Every statement of one migration that would rewrite or long-lock a table that existed before it."""
    created: set[str] = set()
    findings: list[tuple[str, str]] = []

    def existing(name: str) -> bool:
        return name.lower() not in created

    for statement in statements(sql):
        if match := _CREATE_TABLE.match(statement):
            created.add(match.group(1).lower())
        elif match := _CREATE_INDEX.match(statement):
            if not match.group(2) and existing(match.group(3)):
                findings.append((match.group(3), "index built without CONCURRENTLY"))
        elif match := _ALTER_TABLE.match(statement):
            if existing(match.group(1)):
                findings += [(match.group(1), rule) for rule in _alter_findings(*match.groups())]
        elif match := _WRITE.match(statement):
            if existing(match.group(2)):
                findings.append((match.group(2), "bulk write of an existing table in a migration"))
        elif (match := _REWRITE.match(statement)) and existing(match.group(2)):
            findings.append((match.group(2), f"table rewrite or lock ({match.group(1).upper()})"))
    return findings
