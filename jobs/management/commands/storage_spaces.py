"""`python manage.py storage_spaces [--provision-all]`: users' storage spaces (jobs.storage).

Without options it says how many spaces exist and are provisioned. With --provision-all (make
run runs it at every start; an operator runs it once after upgrading) it gives every user a
space, makes each one's bucket and identity in object storage, and moves what existing jobs own
out of the old shared bucket into their owners' (jobs.storage.legacy). Safe to run again.
"""

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobs.storage import iam, legacy
from jobs.storage.models import StorageSpace


class Command(BaseCommand):
    help = "Show users' storage spaces; --provision-all makes every one and moves pre-tenant data into them."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--provision-all", action="store_true",
                            help="give every user a provisioned space and move existing jobs' data into it")

    def handle(self, *args: Any, provision_all: bool, **options: Any) -> None:
        if not settings.S3_ENDPOINT_URL:
            self.stdout.write("No object storage is configured (S3_ENDPOINT_URL): there are no storage spaces.")
            return
        if provision_all:
            try:
                report = legacy.move_legacy_data(legacy.provision_all())
            except iam.StorageUnavailable as exc:
                raise CommandError(f"object storage did not answer: {exc}")
            self.stdout.write(
                f"Storage spaces: {report.spaces_made} made, {report.provisioned} provisioned; "
                f"{report.results_moved} job(s)' results and {report.scripts_moved} script(s) moved into their owners' "
                f"buckets ({report.objects_copied} object(s) copied)."
            )
            for missing in report.missing:
                self.stdout.write(f"  not found, left as it was: {missing}")
            if report.failed:
                raise CommandError("not provisioned: " + "; ".join(report.failed))
        users = get_user_model().objects.count()
        spaces = StorageSpace.objects.count()
        provisioned = StorageSpace.objects.filter(provisioned=True).count()
        self.stdout.write(f"{users} user(s): {spaces} storage space(s), {provisioned} provisioned "
                          f"(buckets {settings.S3_TENANT_BUCKET_PREFIX}-u<id> at {settings.S3_ENDPOINT_URL}).")
