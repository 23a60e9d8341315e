"""``manage.py sequences_advance [--gap N]``: after a restore to a moment, before the copy takes orders, move every id
sequence past anything the lost window may have issued (``skincare.services.sequences_advance``), so no order,
payment attempt or gateway transaction id is issued twice."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from skincare.services import SEQUENCE_RESTORE_GAP, sequences_advance


class Command(BaseCommand):
    help = (
        "After a restore to a moment: move every id sequence of the schema --gap ids ahead (default "
        f"{SEQUENCE_RESTORE_GAP:,}), so ids issued after the restore's target are never issued again."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--gap", type=int, default=SEQUENCE_RESTORE_GAP, help="ids to skip (a positive number)")

    def handle(self, *args: Any, gap: int, **options: Any) -> None:
        try:
            moved = sequences_advance(gap=gap)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        for name, last, new in moved:
            self.stdout.write(f"{name}: {last if last is not None else 'unused'} -> {new}")
        self.stdout.write(f"sequences_advance: {len(moved)} sequences moved {gap:,} ids ahead")
