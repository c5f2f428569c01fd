"""Invariant 1: every biz_key of a rule lives under rule/<id>/<kind>/ (tasks.rules.keys).

Rewrites the keys of runs stored before, and the copies on their dead-letter tickets and event
deliveries, so after the upgrade the same slot or event still renders the key its run already has.
"""

from django.db import migrations

from tasks.rules import keys

BATCH = 500


def _rewrite(apps, convert) -> None:
    TaskRun = apps.get_model("runs", "TaskRun")
    DeadLetter = apps.get_model("deadletters", "DeadLetter")
    EventDelivery = apps.get_model("tasks", "EventDelivery")
    DiagnosticRecord = apps.get_model("tasks", "DiagnosticRecord")
    rows = TaskRun.objects.exclude(rule_id=None).values_list("id", "biz_key", "rule_id", "source", "is_trial")
    changed: list = []
    for run_id, biz_key, rule_id, source, is_trial in rows.iterator(chunk_size=BATCH):
        new = convert(biz_key, rule_id=rule_id, source=source, is_trial=is_trial)
        if new is not None:
            changed.append(TaskRun(id=run_id, biz_key=new))
    for start in range(0, len(changed), BATCH):
        batch = changed[start : start + BATCH]
        TaskRun.objects.bulk_update(batch, ["biz_key"])
        for run in batch:
            DeadLetter.objects.filter(run_id=run.id).update(biz_key=run.biz_key)
            EventDelivery.objects.filter(run_id=run.id).update(biz_key=run.biz_key)
            DiagnosticRecord.objects.filter(run_id=run.id).update(biz_key=run.biz_key)


def forwards(apps, schema_editor) -> None:
    _rewrite(apps, keys.legacy_upgrade)


def backwards(apps, schema_editor) -> None:
    _rewrite(apps, lambda key, *, rule_id, source, is_trial: keys.legacy_downgrade(key, rule_id=rule_id))


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0002_beat_entries"),
        ("tasks", "0004_event_key_by_date"),
        ("deadletters", "0002_default_channel"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
