"""Upgrade: every existing user gets a storage space row (keys generated, not yet provisioned).

`manage.py storage_spaces --provision-all` (make run runs it at every start) then makes the
buckets and identities in object storage and moves what existing jobs own out of the old shared
bucket (jobs.storage.legacy). Users created later get theirs on first need.
"""

import secrets
import string

from django.conf import settings
from django.db import migrations

_KEY = string.ascii_uppercase + string.digits
_SECRET = string.ascii_letters + string.digits


def give_spaces(apps, schema_editor):
    from console.lib import crypto

    User = apps.get_model(*settings.AUTH_USER_MODEL.split("."))
    StorageSpace = apps.get_model("jobs", "StorageSpace")
    have = set(StorageSpace.objects.values_list("user_id", flat=True))
    StorageSpace.objects.bulk_create([
        StorageSpace(
            user_id=user_id, bucket=f"{settings.S3_TENANT_BUCKET_PREFIX}-u{user_id}",
            access_key="SAIU" + "".join(secrets.choice(_KEY) for _ in range(16)),
            secret_key_encrypted=crypto.encrypt("".join(secrets.choice(_SECRET) for _ in range(40))),
        )
        for user_id in User.objects.exclude(pk__in=have).values_list("pk", flat=True)
    ], batch_size=1000)


class Migration(migrations.Migration):

    dependencies = [
        ("jobs", "0014_storage_spaces_and_attempt_keys"),
    ]

    operations = [
        migrations.RunPython(give_spaces, migrations.RunPython.noop),
    ]
