"""A trial run is not the rule's last outcome (the strip shows it, marked), and the trial page names
the key namespace its keys really use."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from runs.models import TaskRun
from tasks.rules import keys
from tasks.triggers.operator import rule_fire
from tests.support.desk import client_for, make_user
from tests.support.rules import make_rule

pytestmark = pytest.mark.django_db


def test_a_trial_is_not_the_rules_last_outcome_on_the_header_or_the_board():
    rule = make_rule("nightly", kind="cron", cron="0 3 * * *", timezone="Asia/Shanghai")
    now = timezone.now()
    real = rule_fire(rule=rule, actor="olga", now=now - timedelta(days=2), slot=now - timedelta(days=2)).run
    trial = rule_fire(rule=rule, actor="olga", now=now, slot=now - timedelta(hours=1), trial=True).run
    TaskRun.objects.filter(pk=real.pk).update(state=TaskRun.State.FAILED)
    TaskRun.objects.filter(pk=trial.pk).update(state=TaskRun.State.SUCCEEDED)
    viewer = client_for(make_user("vera", "Viewers"))
    header = viewer.get(reverse("admin:tasks_triggerrule_change", args=[rule.pk])).context["rule_status"]
    assert header["last"]["run_id"] == real.id and header["last"]["state"] == TaskRun.State.FAILED
    assert [c["run_id"] for c in header["strip"] if c.get("trial")] == [trial.id]  # shown in the strip, marked
    (row,) = viewer.get(reverse("harness-status")).context["b"].rows
    assert (row.last["run_id"], row.last["state"]) == (real.id, TaskRun.State.FAILED)


def test_the_trial_page_names_the_namespace_its_keys_use():
    rule = make_rule("nightly", kind="cron", cron="0 3 * * *", timezone="Asia/Shanghai")
    page = client_for(make_user("olga", "Operators")).get(reverse("admin:tasks_triggerrule_trial", args=[rule.pk]))
    text = page.content.decode()
    assert keys.namespace(rule.id, keys.TRIAL) in text and '"trial:"' not in text
    claim = rule_fire(rule=rule, actor="olga", now=timezone.now(), trial=True)
    assert claim.run.biz_key.startswith(keys.namespace(rule.id, keys.TRIAL))
