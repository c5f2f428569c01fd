"""The rule page's status header: paused or live (who paused it, when, why), the schedule in words,
the next fire, the last outcome, open dead letters, and a strip of the last 48 runs and decisions,
each a link (Airflow's grid, healthchecks' event log). Read-only; four small queries."""

from datetime import datetime
from typing import Any

from django.db.models import Q
from django.urls import reverse
from django.utils.translation import gettext as _

from deadletters.models import DeadLetter
from harness_site.audit.models import AuditEntry
from runs.desk.status import cell_kind
from runs.models import Decision, TaskRun
from tasks.models import TriggerRule
from tasks.rules import keys
from tasks.rules.preview import rule_next_run

HISTORY_CELLS = 48


def rule_history(rule: TriggerRule, *, cells: int = HISTORY_CELLS) -> list[dict]:
    """The rule's last `cells` runs and decisions, oldest first, as strip cells:
    {"kind": run|failed|active|decision|other|empty, "url", "at", "label"}; padded with empty cells."""
    # run_rule_recent_idx (rule, -trigger_at).
    runs = TaskRun.objects.filter(rule=rule).order_by("-trigger_at")[:cells]
    decisions = Decision.objects.filter(rule=rule).order_by("-created_at")[:cells]
    items: list[dict[str, Any]] = []
    for r in runs.only("id", "state", "slot", "trigger_at", "biz_key", "is_trial"):
        items.append(
            {
                "kind": cell_kind(r.state),
                "state": r.state,
                "outcome": r.get_state_display(),
                "biz_key": r.biz_key,
                "at": r.slot or r.trigger_at,
                "url": reverse("admin:runs_taskrun_change", args=[r.id]),
                "label": _("run #%(id)s %(biz_key)s: %(state)s")
                % {"id": r.id, "biz_key": keys.unescape(r.biz_key), "state": r.get_state_display()}
                + (" (" + _("trial") + ")" if r.is_trial else ""),
                "run_id": r.id,
                "trial": r.is_trial,
            }
        )
    for d in decisions.only("id", "reason", "slot", "created_at", "biz_key"):
        items.append(
            {
                "kind": "decision",
                "state": "decision",
                "outcome": _("no run"),
                "biz_key": d.biz_key,
                "at": d.slot or d.created_at,
                "url": reverse("admin:runs_decision_change", args=[d.id]),
                "label": _("no run: %(reason)s") % {"reason": d.get_reason_display()},
                "decision_id": d.id,
            }
        )
    items.sort(key=lambda i: i["at"], reverse=True)
    items = items[:cells][::-1]
    return [{"kind": "empty", "url": "", "at": None, "label": ""}] * (cells - len(items)) + items


def rule_status(rule: TriggerRule, *, now: datetime) -> dict:
    """The header's facts: paused by whom and when, last outcome, open tickets, the strip."""
    paused_by = None
    if not rule.enabled:
        paused_by = (
            AuditEntry.objects.filter(target_type="rule", target_id=str(rule.pk), action=AuditEntry.Action.RULE_PAUSE)
            .order_by("-at")
            .first()
        )
    strip = rule_history(rule)
    # A trial says nothing about how the rule's real work went: the strip shows it, "last outcome" does not.
    last = next((c for c in reversed(strip) if c["kind"] not in ("empty", "active") and not c.get("trial")), None)
    open_tickets = DeadLetter.objects.filter(
        Q(run__rule=rule) | Q(rule_name=rule.name), state=DeadLetter.State.PENDING_MANUAL
    ).count()
    return {
        "paused_by": paused_by,
        "strip": strip,
        "last": last,
        "open_tickets": open_tickets,
        # The next fire its guards let run, as the preview says (not a holiday's cron fire).
        "next_run": rule_next_run(rule) if rule.enabled else rule.next_fire_at,
        "now": now,
    }
