"""Seed the workspace contract periods (editable by staff in the admin)."""

from decimal import Decimal

from django.db import migrations

TERMS = {1: Decimal("10.00"), 3: Decimal("20.00"), 6: Decimal("30.00"), 12: Decimal("40.00")}


def seed(apps, schema_editor):
    ContractTerm = apps.get_model("workspaces", "ContractTerm")
    for months, discount in TERMS.items():
        ContractTerm.objects.update_or_create(months=months, defaults={"discount_percent": discount})


def unseed(apps, schema_editor):
    apps.get_model("workspaces", "ContractTerm").objects.filter(months__in=TERMS).delete()


class Migration(migrations.Migration):
    dependencies = [("workspaces", "0001_initial")]
    operations = [migrations.RunPython(seed, unseed)]
