"""The catch-up approval gate: catch-up runs above a rule's threshold wait until an operator approves
(or rejects) them in the admin. Approval re-paces them from the moment of approval."""

from datetime import datetime, timedelta

from django.contrib import admin, messages
from django.db import transaction
from django.utils import timezone

from runs.dispatch import run_dispatch_on_commit
from runs.models import TaskRun

APPROVE_PERM = "runs.approve_catchup"


def _gated(ids: list[int]):
    # Only gated catch-up runs: the same state is used by runs parked for an action approval,
    # which have attempts and are approved elsewhere.
    return TaskRun.objects.filter(
        id__in=ids, state=TaskRun.State.AWAITING_APPROVAL, source=TaskRun.Source.CATCHUP, attempts=0
    )


def catchup_approve(*, run_ids: list[int], actor: str, now: datetime) -> int:
    """Release gated catch-up runs; each rule's runs are paced again from `now` in slot order.
    Returns how many were released (a run approved meanwhile by someone else is not counted)."""
    released, due = 0, []
    with transaction.atomic():
        runs = list(
            _gated(run_ids).select_for_update(of=("self",)).select_related("rule").order_by("rule_id", "slot", "id")
        )
        position: dict[int | None, int] = {}
        for run in runs:
            spacing = timedelta(seconds=run.rule.catchup_spacing_seconds if run.rule else 0)
            i = position[run.rule_id] = position.get(run.rule_id, -1) + 1
            run_after = now + spacing * i
            # Compare-and-set: 0 rows means it was approved or rejected concurrently.
            n = _gated([run.id]).update(
                state=TaskRun.State.PENDING,
                run_after=run_after,
                approved_by=actor[:150],
                approved_at=now,
                dispatched_at=None,
            )
            released += n
            if n and run_after <= now:
                due.append(run.id)
        run_dispatch_on_commit(run_ids=due, now=now)
    return released


def catchup_reject(*, run_ids: list[int], actor: str, now: datetime) -> int:
    """Cancel gated catch-up runs; the slot keeps its (cancelled) run, so it stays accounted for."""
    return _gated(run_ids).update(
        state=TaskRun.State.CANCELLED,
        finish_at=now,
        approved_by=actor[:150],
        approved_at=now,
        last_error=f"catch-up rejected by {actor}",
    )


class CatchupApprovalMixin:
    """Adds "Approve catch-up" and "Reject catch-up" to the run list for users with the permission."""

    def get_actions(self, request):
        actions = super().get_actions(request)
        if request.user.has_perm(APPROVE_PERM):
            for name in ("approve_catchup", "reject_catchup"):
                func = getattr(type(self), name)
                actions[name] = (func, name, func.short_description)
        return actions

    @admin.action(description="Approve selected catch-up runs (awaiting approval)")
    def approve_catchup(self, request, queryset):
        n = catchup_approve(
            run_ids=list(queryset.values_list("id", flat=True)), actor=request.user.get_username(), now=timezone.now()
        )
        self.message_user(
            request,
            f"Approved {n} catch-up run(s); they start paced from now.",
            messages.SUCCESS if n else messages.WARNING,
        )

    @admin.action(description="Reject selected catch-up runs (awaiting approval)")
    def reject_catchup(self, request, queryset):
        n = catchup_reject(
            run_ids=list(queryset.values_list("id", flat=True)), actor=request.user.get_username(), now=timezone.now()
        )
        self.message_user(request, f"Rejected {n} catch-up run(s).", messages.SUCCESS if n else messages.WARNING)
