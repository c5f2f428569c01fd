"""A backfill's confirmation: the plan the page showed travels back signed, so the click executes
exactly that plan (for that rule and user, within BACKFILL_CONFIRM_MAX_AGE) or nothing."""

from datetime import date, datetime, timedelta

from django import forms
from django.core import signing
from django.utils.translation import gettext as _

from tasks.models import TriggerRule
from tasks.triggers.operator import BackfillPlan

# The salt keeps the name of the module this came from, so a confirmation page open across a deploy still holds.
BACKFILL_CONFIRM_SALT = "tasks.admin.rules.backfill-confirm"
BACKFILL_CONFIRM_MAX_AGE = 30 * 60  # seconds


def backfill_token(plan: BackfillPlan, *, reason: str, user) -> str:
    """The plan a confirmation page shows, signed: what the click may execute, and nothing else."""
    if plan.planned_at is None:  # rule_backfill_plan sets it: a plan made otherwise cannot be confirmed
        raise ValueError("a backfill plan without its planning instant")
    return signing.dumps(
        {
            "rule": plan.rule.pk,
            "version": plan.rule_version,
            "start": plan.start.isoformat(),
            "end": plan.end.isoformat(),
            "spacing": int(plan.spacing.total_seconds()),
            "planned_at": plan.planned_at.isoformat(),
            "slots": len(plan.slots),
            "new_runs": plan.new_runs,
            "reason": reason,
            "by": user.pk,
        },
        salt=BACKFILL_CONFIRM_SALT,
    )


class BackfillConfirmForm(forms.Form):
    """The confirmation click: only the signed plan travels back; it is checked here, never edited."""

    token = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args, rule: TriggerRule, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.rule, self.user = rule, user

    def clean(self):
        super().clean()
        data = self.cleaned_data
        invalid = forms.ValidationError(
            _(
                "This confirmation is not valid (it was changed, or made for another rule or user); "
                "nothing was created. Plan the backfill again."
            ),
            code="invalid",
        )
        try:
            signed = signing.loads(
                data.get("token") or "", salt=BACKFILL_CONFIRM_SALT, max_age=BACKFILL_CONFIRM_MAX_AGE
            )
        except signing.SignatureExpired:
            raise forms.ValidationError(
                _(
                    "This confirmation has expired (it holds for %(minutes)s minutes); nothing was created. "
                    "Plan the backfill again."
                )
                % {"minutes": BACKFILL_CONFIRM_MAX_AGE // 60},
                code="expired",
            ) from None
        except signing.BadSignature:
            raise invalid from None
        try:
            confirmed = {
                "rule_version": int(signed["version"]),
                "start": date.fromisoformat(signed["start"]),
                "end": date.fromisoformat(signed["end"]),
                "spacing": timedelta(seconds=int(signed["spacing"])),
                "planned_at": datetime.fromisoformat(signed["planned_at"]),
                "slots": int(signed["slots"]),
                "new_runs": int(signed["new_runs"]),
                "reason": str(signed["reason"]),
            }
            mine = signed["rule"] == self.rule.pk and signed["by"] == self.user.pk
        except (KeyError, TypeError, ValueError):
            raise invalid from None
        if not mine:
            raise invalid
        data["confirmed"] = confirmed
        return data
