"""Mint a node agent token: `python manage.py nodetoken NAME` (shown once, stored hashed)."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobs.models import NodeToken
from jobs.validation import name_error


class Command(BaseCommand):
    help = "Create a token for the node agent NAME (revoking that node's earlier tokens) and print it once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="the node's name, as the agent's --name will give it")
        parser.add_argument("--quiet", action="store_true", help="print only the token")

    def handle(self, *args: Any, name: str, quiet: bool, **options: Any) -> None:
        if error := name_error(name):
            raise CommandError(f"Invalid node name {name!r}: {error}")
        _, token = NodeToken.mint(name)
        if quiet:
            self.stdout.write(token)
            return
        self.stdout.write(self.style.SUCCESS(f"Token for node {name} (shown only once):"))
        self.stdout.write(token)
        # never on the agent's command line: every user of the node reads /proc/PID/cmdline
        self.stdout.write(
            "Run on the node (as root), with the token in the agent's environment, never on its command line:\n"
            f"  NODEAGENT_TOKEN={token} python -m nodeagent --console http://CONSOLE:8000 --name {name}\n"
            "or save it in a file only root can read (chmod 600 FILE) and pass --token-file FILE."
        )
