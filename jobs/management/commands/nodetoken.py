"""Mint a node agent token: `python manage.py nodetoken NAME` (shown once, stored hashed)."""

from django.core.management.base import BaseCommand, CommandError

from jobs.models import NodeToken
from jobs.validation import name_error


class Command(BaseCommand):
    help = "Create a token for the node agent NAME (revoking that node's earlier tokens) and print it once."

    def add_arguments(self, parser):
        parser.add_argument("name", help="the node's name, as the agent's --name will give it")
        parser.add_argument("--quiet", action="store_true", help="print only the token")

    def handle(self, *args, name: str, quiet: bool, **options):
        if error := name_error(name):
            raise CommandError(f"Invalid node name {name!r}: {error}")
        _, token = NodeToken.mint(name)
        if quiet:
            self.stdout.write(token)
            return
        self.stdout.write(self.style.SUCCESS(f"Token for node {name} (shown only once):"))
        self.stdout.write(token)
        self.stdout.write(f"Run on the node: python -m nodeagent --console http://CONSOLE:8000 --token {token} --name {name}")
