"""Out of the box, urgent alerts (final failures, expired slots, a stalled scheduler) mail ADMINS.

The channel is installed disabled while ADMINS is unset: it would fail every urgent alert of a
fresh install. Set ADMINS, then enable it under Alert channels."""

from django.conf import settings
from django.db import migrations

DEFAULT_CHANNEL = "On-call email (ADMINS)"


def install(apps, schema_editor):
    apps.get_model("deadletters", "AlertChannel").objects.get_or_create(
        name=DEFAULT_CHANNEL, defaults={"kind": "email", "recipients": "", "min_severity": "urgent", "enabled": bool(settings.ADMINS)}
    )


def remove(apps, schema_editor):
    apps.get_model("deadletters", "AlertChannel").objects.filter(name=DEFAULT_CHANNEL).delete()


class Migration(migrations.Migration):
    dependencies = [("deadletters", "0001_initial")]

    operations = [migrations.RunPython(install, remove)]
