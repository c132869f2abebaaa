"""Create a first administrator when none exists, and print its password once."""

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = "Create the user 'admin' with a generated password if no superuser exists yet."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin")

    def handle(self, *args: Any, username: str, **options: Any) -> None:
        User = get_user_model()
        if User.objects.filter(is_superuser=True).exists():
            self.stdout.write("An administrator already exists; log in with its password.")
            return
        if User.objects.filter(username=username).exists():
            raise CommandError(
                f"The user '{username}' exists but is not an administrator; "
                "run with --username NAME to create another one."
            )
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser(username=username, email="", password=password)
        self.stdout.write(self.style.SUCCESS(
            f"Created administrator '{username}' with password: {password}\n"
            "This password is shown only once: keep it."
        ))
