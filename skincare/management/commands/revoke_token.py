from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from skincare import services


class Command(BaseCommand):
    help = "Revoke every API token of the customer USERNAME (they answer 401 from now on)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")

    def handle(self, *args: Any, username: str, **options: Any) -> None:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r}")
        count = services.api_tokens_revoke(user=user)
        self.stdout.write(f"revoked {count} token(s) of {username}")
