# The project fields (issue 33) and the goodput fields (issue 36) were added side by side.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0016_job_workdir_inputs_from_checkpoint'),
        ('jobs', '0018_attempt_faults'),
    ]

    operations = [
    ]
