"""The admin for guards: flags set and cleared through the admin, guard fields validated on the rule form."""

import html

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from tasks.models import ReadinessFlag, ServiceIdentity, TriggerRule
from tests.support.rules import rule_form_post

pytestmark = pytest.mark.django_db


@pytest.fixture
def op(client):
    user = get_user_model().objects.create_superuser("op", "op@example.com", "pw-op-123456")
    client.force_login(user)
    return user


def test_an_operator_sets_and_clears_a_flag_in_the_admin(client, op):
    response = client.post(
        reverse("admin:tasks_readinessflag_add"),
        {"name": "pipeline.raw_data.ready", "scope": "2026-12-01", "note": "manual"},
    )
    assert response.status_code == 302
    flag = ReadinessFlag.objects.get()
    assert (flag.name, flag.scope, flag.set_by) == ("pipeline.raw_data.ready", "2026-12-01", "op")
    response = client.post(
        reverse("admin:tasks_readinessflag_changelist"), {"action": "clear_flags", "_selected_action": [flag.pk]}
    )
    assert response.status_code == 302
    assert not ReadinessFlag.objects.exists()


def _rule_form(**over) -> dict:
    fields = {
        "name": "guarded",
        "reason": "test",
        "cron": "0 8 * * *",
        "timezone": "Europe/Berlin",
        "dedupe_key_template": "{rule}:{business_date}",
        "params": "{}",
    }
    return rule_form_post(**{**fields, **over})


@pytest.mark.parametrize(
    ("over", "field", "text"),
    [
        ({"weekdays": "mon-funday"}, "weekdays", "mon-fri"),
        ({"excluded_dates": '["2026-02-30"]'}, "excluded_dates", "YYYY-MM-DD"),
        ({"depends_on": '["data.ready"]', "not_ready_policy": "wait"}, "ready_deadline", "local deadline"),
        ({"hours_start": "17:00", "hours_end": "09:00"}, "hours_end", "end after they start"),
    ],
)
def test_the_rule_form_shows_bad_guard_settings_on_the_field_and_saves_nothing(client, op, over, field, text):
    response = client.post(reverse("admin:tasks_triggerrule_add"), _rule_form(**over))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert any(text in e for e in errors[field]), errors
    assert text in html.unescape(response.content.decode())
    assert not TriggerRule.objects.exists()


def test_the_rule_form_refuses_an_identity_that_may_not_run_the_skill(client, op):
    ident = ServiceIdentity.objects.create(name="reporting", allowed_skills=["harness.record"])
    response = client.post(reverse("admin:tasks_triggerrule_add"), _rule_form(identity=str(ident.pk)))
    assert response.status_code == 200
    assert "may not run 'harness.noop'" in html.unescape(response.content.decode())
    assert not TriggerRule.objects.exists()


def test_the_rule_form_saves_guards_and_defaults_what_it_omits(client, op):
    response = client.post(
        reverse("admin:tasks_triggerrule_add"),
        _rule_form(
            weekdays="mon-fri",
            hours_start="09:00",
            hours_end="17:00",
            depends_on='["data.ready"]',
            ready_deadline="12:00",
        ),
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    rule = TriggerRule.objects.get()
    assert (rule.weekdays, rule.depends_on, rule.overlap, rule.not_ready_policy) == (
        "mon-fri",
        ["data.ready"],
        "allow",
        "wait",
    )
    page = client.get(reverse("admin:tasks_triggerrule_change", args=[rule.pk])).content.decode()
    assert 'id="guard-preview"' in page
