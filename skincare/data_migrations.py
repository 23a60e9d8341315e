"""The two shapes of a data migration that the migration guard lets through (devtools/migration_guard.py; how to
write one: docs/runbooks/deploys.md#write-a-data-migration).

A migration runs while the shop sells. One ``UPDATE`` of every order holds a lock on each row it changed until it
commits, and every checkout or payment that touches one of those orders waits that long. So a data change of an
existing table is one of:

- :class:`RunInBatches`: the change, cut into batches of ``batch_size`` rows in primary-key order, each batch its
  own short transaction (the migration is ``atomic = False``; in an atomic migration it refuses to run);
- :class:`RunOnSmallTable`: Python code for a table that is small by nature (a catalogue, a settings row): it states
  the most rows it is written for, and refuses to run, before changing anything, when the table has more.

A plain ``RunPython``, or a ``RunSQL`` that updates, deletes, merges or copies rows of an existing table, is refused by
the guard.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import migrations, transaction

# batch(apps, schema_editor, after, limit): change at most ``limit`` rows whose key is above ``after`` (None: from the
# first), in key order, and return the highest key it changed (None: nothing left).
Batch = Callable[[Any, Any, Any, int], Any]
Code = Callable[[Any, Any], None]

COUNT_UP_TO_SQL = "SELECT count(*) FROM (SELECT 1 FROM {table} LIMIT %s) AS bounded"


class DataMigrationRefused(RuntimeError):
    """A data migration that would hold too many rows, or all of them, in one transaction."""


class RunInBatches(migrations.RunPython):
    """``batch`` called again and again, each call in a transaction of its own, until it returns ``None``."""

    def __init__(
        self, table: str, batch: Batch, *, batch_size: int = 1000, reverse_code: Code | None = None, **kwargs: Any
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.table, self.batch, self.batch_size = table, batch, batch_size
        super().__init__(self._run, reverse_code or migrations.RunPython.noop, **kwargs)

    def _run(self, apps: Any, schema_editor: Any) -> None:
        connection = schema_editor.connection
        if connection.in_atomic_block:
            raise DataMigrationRefused(
                f"{self.describe()}: its migration must be atomic = False (one transaction per batch, not one for all)"
            )
        after = None
        while True:
            with transaction.atomic(using=connection.alias):
                last = self.batch(apps, schema_editor, after, self.batch_size)
            if last is None:
                return
            after = last

    def describe(self) -> str:
        return f"Data migration in batches of {self.batch_size} rows of {self.table}: {self.batch.__name__}"

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        return self.__class__.__name__, [self.table, self.batch], {"batch_size": self.batch_size}


class RunOnSmallTable(migrations.RunPython):
    """``code`` run only when ``table`` has at most ``max_rows`` rows; otherwise :class:`DataMigrationRefused`."""

    def __init__(
        self, table: str, code: Code, *, max_rows: int, reverse_code: Code | None = None, **kwargs: Any
    ) -> None:
        self.table, self.small_table_code, self.max_rows = table, code, max_rows
        super().__init__(self._run, reverse_code or migrations.RunPython.noop, **kwargs)

    def _run(self, apps: Any, schema_editor: Any) -> None:
        connection = schema_editor.connection
        with connection.cursor() as cursor:  # counts no further than one row past the bound
            cursor.execute(COUNT_UP_TO_SQL.format(table=connection.ops.quote_name(self.table)), [self.max_rows + 1])
            rows = cursor.fetchone()[0]
        if rows > self.max_rows:
            raise DataMigrationRefused(
                f"{self.table} has more than {self.max_rows} rows: write this data migration with RunInBatches"
            )
        self.small_table_code(apps, schema_editor)

    def describe(self) -> str:
        return f"Data migration on a small table {self.table} (at most {self.max_rows} rows, refused above)"

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        return self.__class__.__name__, [self.table, self.small_table_code], {"max_rows": self.max_rows}
