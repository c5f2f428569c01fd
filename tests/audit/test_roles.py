# ruff: noqa: F811  (pytest fixtures imported from tests.support.desk are redefined as arguments)
"""Roles: the data migration's groups and what each may do; the audit log is read-only."""

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from audit.roles import GROUPS
from tests.support.desk import make_rule, operator, operator_client, viewer, viewer_client  # noqa: F401

pytestmark = pytest.mark.django_db


def test_it_installs_the_three_groups_with_their_permissions():
    for name, codenames in GROUPS.items():
        group = Group.objects.get(name=name)
        got = {f"{p.content_type.app_label}.{p.codename}" for p in group.permissions.select_related("content_type")}
        assert got == set(codenames), name
    viewers = {p.codename for p in Group.objects.get(name="Viewers").permissions.all()}
    assert all(c.startswith("view_") for c in viewers)


def test_it_lets_operators_edit_rules_and_viewers_only_look(operator_client, viewer_client):
    rule = make_rule()
    url = reverse("admin:tasks_triggerrule_change", args=[rule.pk])
    assert viewer_client.get(url).status_code == 200
    assert viewer_client.post(url, {"name": "renamed"}).status_code == 403
    assert viewer_client.get(reverse("admin:tasks_triggerrule_add")).status_code == 403
    assert operator_client.get(reverse("admin:tasks_triggerrule_add")).status_code == 200


def test_it_keeps_the_audit_log_read_only(operator_client, operator):
    from django.utils import timezone

    from audit.models import AuditEntry
    from tasks.rule_actions import rule_pause

    rule = make_rule()
    rule_pause(rule=rule, actor=operator, now=timezone.now(), reason="maintenance")
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.action, entry.target_type, entry.target_label, entry.reason) == (
        "olga",
        "rule.pause",
        "rule",
        "daily-report",
        "maintenance",
    )
    url = reverse("admin:audit_auditentry_change", args=[entry.pk])
    assert operator_client.get(url).status_code == 200
    assert operator_client.post(url, {"reason": "rewritten"}).status_code == 403
    assert (
        operator_client.post(reverse("admin:audit_auditentry_delete", args=[entry.pk]), {"post": "yes"}).status_code
        == 403
    )
    entry.refresh_from_db()
    assert entry.reason == "maintenance"
