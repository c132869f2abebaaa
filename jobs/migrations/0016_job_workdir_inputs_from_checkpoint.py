# Issue 33 phase 2: a job's project (workdir), its inputs, and the job whose checkpoint it starts from

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0015_a_storage_space_for_every_user'),
    ]

    operations = [
        migrations.AddField(
            model_name='trainingjob',
            name='from_checkpoint',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='jobs.trainingjob'),
        ),
        migrations.AddField(
            model_name='trainingjob',
            name='from_checkpoint_step',
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='trainingjob',
            name='inputs',
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name='trainingjob',
            name='workdir_url',
            field=models.CharField(blank=True, max_length=1024),
        ),
    ]
