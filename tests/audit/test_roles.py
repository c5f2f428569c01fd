# ruff: noqa: F811  (pytest fixtures imported from tests.support.desk are redefined as arguments)
"""Roles: the data migration's groups and what each may do; the audit log is read-only."""

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from harness_site.audit.roles import GROUPS
from tests.support.desk import (  # noqa: F401
    daily_report,
    oncall,
    oncall_client,
    operator,
    operator_client,
    viewer,
    viewer_client,
)

pytestmark = pytest.mark.django_db


def test_it_installs_the_three_groups_with_their_permissions():
    for name, codenames in GROUPS.items():
        group = Group.objects.get(name=name)
        got = {f"{p.content_type.app_label}.{p.codename}" for p in group.permissions.select_related("content_type")}
        assert got == set(codenames), name
    viewers = {p.codename for p in Group.objects.get(name="Viewers").permissions.all()}
    assert all(c.startswith("view_") for c in viewers)


def test_it_lets_operators_edit_rules_and_viewers_only_look(operator_client, viewer_client):
    rule = daily_report()
    url = reverse("admin:tasks_triggerrule_change", args=[rule.pk])
    assert viewer_client.get(url).status_code == 200
    assert viewer_client.post(url, {"name": "renamed"}).status_code == 403
    assert viewer_client.get(reverse("admin:tasks_triggerrule_add")).status_code == 403
    assert operator_client.get(reverse("admin:tasks_triggerrule_add")).status_code == 200


def test_it_keeps_the_audit_log_read_only(operator_client, operator):
    from django.utils import timezone

    from harness_site.audit.models import AuditEntry
    from tasks.triggers.operator import rule_pause

    rule = daily_report()
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


def _awaiting_proposal():
    """A run a skill parked for approval, with its pending high-risk proposal (as runs/engine/approvals.py expects)."""
    from datetime import timedelta

    from django.utils import timezone

    from runs.models import ActionProposal, TaskRun

    now = timezone.now()
    run = TaskRun.objects.create(
        biz_key="report:2026-03-01",
        rule_name="daily-report",
        skill="harness.noop",
        source="scheduler",
        trigger_at=now,
        run_after=now,
        state=TaskRun.State.AWAITING_APPROVAL,
    )
    return ActionProposal.objects.create(
        run=run,
        step="act",
        action="harness.record_guarded",
        risk="high",
        proposed_at=now,
        expires_at=now + timedelta(hours=24),
    )


def _decide(client, proposal, action: str):
    return client.post(
        reverse("admin:runs_actionproposal_changelist"),
        {"action": action, "_selected_action": [proposal.pk], "index": 0},
    )


def test_it_lets_on_call_approve_a_proposed_action_and_viewers_not(oncall_client, viewer_client):
    from harness_site.audit.models import AuditEntry
    from runs.models import ActionProposal, TaskRun

    proposal = _awaiting_proposal()

    # A viewer sees the proposal but is offered no decision, and a forged POST changes nothing.
    assert viewer_client.get(reverse("admin:runs_actionproposal_changelist")).status_code == 200
    _decide(viewer_client, proposal, "approve")
    proposal.refresh_from_db()
    assert proposal.status == ActionProposal.Status.PENDING
    assert not AuditEntry.objects.exists()

    response = _decide(oncall_client, proposal, "approve")
    assert response.status_code == 302
    proposal.refresh_from_db()
    assert (proposal.status, proposal.decided_by) == (ActionProposal.Status.APPROVED, "omar")
    assert proposal.run.state == TaskRun.State.PENDING
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.action, entry.get_action_display()) == (
        "omar",
        AuditEntry.Action.PROPOSAL_APPROVE,
        "Proposed action approved",
    )


def test_it_gives_operators_and_on_call_the_decision_on_proposals():
    from django.contrib.auth.models import Group

    for name in ("Operators", "On-call"):
        perms = Group.objects.get(name=name).permissions.values_list("codename", flat=True)
        assert "decide_actionproposal" in perms, name
    assert "decide_actionproposal" not in Group.objects.get(name="Viewers").permissions.values_list(
        "codename", flat=True
    )
