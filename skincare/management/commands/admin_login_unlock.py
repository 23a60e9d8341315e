from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from skincare.login_throttle import UNKNOWN_ADDRESS, unlock


class Command(BaseCommand):
    help = (
        "Clear an admin login lock: forget the failed logins of --username and/or --address (both: that pair only; "
        f"--address {UNKNOWN_ADDRESS} is the bucket of requests without a readable address)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", help="the account, as typed in the login form")
        parser.add_argument(
            "--address",
            help=f"a client address, read as the throttle reads one (::ffff:a.b.c.d is a.b.c.d; IPv6: its /64), or "
            f"{UNKNOWN_ADDRESS!r}",
        )

    def handle(self, *args: Any, username: str | None, address: str | None, **options: Any) -> None:
        if username is None and address is None:
            raise CommandError("name the lock: --username USERNAME and/or --address ADDRESS")
        try:
            count = unlock(username=username, address=address)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        who = " from ".join(part for part in (username, address) if part is not None)
        self.stdout.write(f"forgot {count} failed login(s) of {who}")
