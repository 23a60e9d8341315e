from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from skincare import services


class Command(BaseCommand):
    help = (
        "Create the customer USERNAME if needed and print a fresh API token once (any previous token stops "
        "working). Only its SHA-256 digest is stored; it expires after API_TOKEN_TTL_SECONDS when that is set."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")

    @transaction.atomic
    def handle(self, *args: Any, username: str, **options: Any) -> None:
        user, created = get_user_model().objects.get_or_create(username=username)
        if created:
            user.set_unusable_password()
            user.save(update_fields=["password"])
        services.api_tokens_revoke(user=user)
        self.stdout.write(services.api_token_issue(user=user))
