from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from skincare.login_throttle import login_username, revoke_devices


class Command(BaseCommand):
    help = (
        "List the admin's known devices (browsers the login throttle exempts from the address counters), or revoke "
        "them: one (--revoke ID), an account's (--revoke-all --username NAME) or every one (--revoke-all)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", help="only this account's devices (as typed in the login form)")
        parser.add_argument("--revoke", metavar="ID", help="revoke the device with this id (from the list)")
        parser.add_argument("--revoke-all", action="store_true", help="revoke every device (of --username, when given)")

    def handle(self, *args: Any, username: str | None, revoke: str | None, revoke_all: bool, **options: Any) -> None:
        from skincare.models import KnownDevice

        if revoke is not None and revoke_all:
            raise CommandError("either --revoke ID or --revoke-all, not both")
        if revoke is not None:
            if not KnownDevice.objects.filter(device=revoke).exists():
                raise CommandError(f"no known device {revoke!r} (list them: without options)")
            count = revoke_devices(device=revoke)
            self.stdout.write(f"revoked {count} known device(s): {revoke}")
            return
        if revoke_all:
            count = revoke_devices(username=username)
            self.stdout.write(f"revoked {count} known device(s){f' of {username}' if username is not None else ''}")
            return
        devices = KnownDevice.objects.order_by("username", "-issued_at")
        if username is not None:
            devices = devices.filter(username=login_username(username))
        for device in devices:
            self.stdout.write(
                f"{device.device}  {device.username}  since {device.issued_at:%Y-%m-%d %H:%M}  "
                f"from {device.client_ip or 'unknown'}  {device.user_agent or '-'}"
            )
        self.stdout.write(f"{devices.count()} known device(s)")
