"""The rule pages' forms: the rule itself (a one-time rule's run-at typed on the rule zone's wall
clock and stored as UTC), Run now / Trial run, and Backfill's plan."""

from datetime import UTC, datetime

from django import forms
from django.contrib.admin import widgets as admin_widgets
from django.utils.html import escape
from django.utils.text import capfirst, format_lazy
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from tasks import sentences
from tasks.models import TriggerRule
from tasks.rules import schedule
from tasks.rules.preview import WallInstant, wall_instant
from tasks.triggers.operator import DEFAULT_BACKFILL_SPACING, MAX_BACKFILL_RUNS

SLOT_FORMATS = ("%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S")


def parse_slot(text: str, zone_name: str) -> datetime:
    """A wall-clock time typed in the rule's zone → an aware UTC instant."""
    zone = schedule.validate_timezone(zone_name)
    for fmt in SLOT_FORMATS:
        try:
            wall = datetime.strptime(text.strip(), fmt)  # noqa: DTZ007 - a wall time in the rule's zone
        except ValueError:
            continue
        try:
            return wall.replace(tzinfo=zone).astimezone(UTC)
        except OverflowError:  # year 1 or 9999 pushed past datetime's range by the zone's offset
            break
    raise forms.ValidationError(
        _("%(text)s is not a time like 2026-12-01 09:00 (in %(zone)s).") % {"text": repr(text), "zone": zone_name}
    )


class WallClockDateTimeField(forms.SplitDateTimeField):
    """The admin's date and time inputs, kept as typed: a naive wall-clock datetime. Django would
    read it in the server's TIME_ZONE (UTC); TriggerRuleForm reads it in the rule's own zone."""

    def compress(self, data_list):
        if not data_list:
            return None
        if data_list[0] in self.empty_values:
            raise forms.ValidationError(self.error_messages["invalid_date"], code="invalid_date")
        if data_list[1] in self.empty_values:
            raise forms.ValidationError(self.error_messages["invalid_time"], code="invalid_time")
        return datetime.combine(*data_list)


def run_at_field() -> WallClockDateTimeField:
    return WallClockDateTimeField(
        required=False,
        label=capfirst(TriggerRule._meta.get_field("run_at").verbose_name),
        widget=admin_widgets.AdminSplitDateTime,
        help_text=gettext_lazy(
            "For one-time rules: the date and time on the wall clock in the rule's timezone (the Timezone "
            "field), not UTC; stored as UTC and shown here in the rule's timezone."
        ),
    )


def read_run_at(wall: datetime, *, timezone: str, dst_gap: str, dst_repeat: str) -> WallInstant:
    """A typed run-at on the rule zone's clock; forms.ValidationError (translated) says what is wrong.
    A schedule.ScheduleError for the zone or a DST policy is left to the caller: it names that field."""
    try:
        found = wall_instant(wall, timezone=timezone, dst_gap=dst_gap, dst_repeat=dst_repeat)
    except schedule.ScheduleError as exc:
        if exc.field != "run_at":
            raise
        raise forms.ValidationError(
            _("%(wall)s in %(zone)s is out of range: give an instant between year 1 and 9999-12-31 UTC.")
            % {"wall": f"{wall:%Y-%m-%d %H:%M}", "zone": timezone},
            code="out_of_range",
        ) from exc
    if found.utc is None:
        raise forms.ValidationError(
            _(
                "%(wall)s does not exist in %(zone)s (the clocks go forward then). With DST gap "
                '"skip" this one-time rule would never run: choose another time, or DST gap "shift".'
            )
            % {"wall": f"{wall:%Y-%m-%d %H:%M}", "zone": timezone},
            code="dst_gap",
        )
    return found


def run_at_note(found: WallInstant) -> str:
    """What a DST gap or repeat did to a typed run-at, for the operator; "" when nothing."""
    local = found.local
    values = {
        "wall": f"{found.wall:%Y-%m-%d %H:%M}",
        "zone": found.timezone,
        "local": f"{local:%H:%M %Z}",
        "utc": f"{found.utc:%Y-%m-%d %H:%M} UTC",
    }
    if found.dst == "gap":
        return (
            _("%(wall)s does not exist in %(zone)s (the clocks go forward then): it runs at %(local)s (%(utc)s).")
            % values
        )
    if found.dst == "repeat":
        return (
            _("%(wall)s happens twice in %(zone)s (the clocks go back then): it runs at %(local)s (%(utc)s).") % values
        )
    return ""


class TriggerRuleForm(forms.ModelForm):
    """The rule admin's form: a one-time rule's run-at is typed and shown on the rule zone's wall
    clock (its DST policies decide gaps and repeats, as for cron) and stored as UTC."""

    run_at = run_at_field()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name, rows in (("reason", 2), ("params", 4), ("output_schema", 4)):
            if name in self.fields:  # a shorter page: the boxes grow as the operator types (resize)
                self.fields[name].widget.attrs["rows"] = rows
        # The admin shows help text as HTML: its "rule/<id>/<kind>/" would vanish as unknown tags.
        if "dedupe_key_template" in self.fields:
            field = self.fields["dedupe_key_template"]
            field.help_text = escape(field.help_text)
        self.run_at_note = ""
        self._shown_run_at = None
        stored = self.instance.run_at
        if stored is not None and "run_at" in self.fields:
            try:
                zone = schedule.validate_timezone(self.instance.timezone)
            except schedule.ScheduleError:
                return  # shown as Django shows it; the zone must be fixed before the form saves
            self._shown_run_at = stored.astimezone(zone).replace(tzinfo=None)
            self.initial["run_at"] = self._shown_run_at

    def clean(self):
        super().clean()
        data = self.cleaned_data
        wall = data.get("run_at")
        if not isinstance(wall, datetime) or wall.tzinfo is not None:
            return data
        zone = data.get("timezone") or ""
        if (
            self._shown_run_at is not None
            and wall == self._shown_run_at.replace(microsecond=0)
            and zone == self.instance.timezone
        ):
            data["run_at"] = self.instance.run_at  # untouched: keep the stored instant (and its fold)
            return data
        kind = data.get("kind")
        try:
            found = read_run_at(
                wall,
                timezone=zone,
                # Only a one-time rule's run-at must exist; an ignored one is just moved past a gap.
                dst_gap=(data.get("dst_gap") or "shift") if kind == TriggerRule.Kind.ONCE else "shift",
                dst_repeat=data.get("dst_repeat") or "first",
            )
        except forms.ValidationError as exc:
            self.add_error("run_at", exc)
        except schedule.ScheduleError:
            # The zone (or a DST policy) is invalid: the model's clean says so on that field, so the
            # form cannot save. Keep the typed value, unread, so it is not also reported as missing.
            data["run_at"] = wall.replace(tzinfo=UTC)
        else:
            data["run_at"] = found.utc
            self.run_at_note = run_at_note(found) if kind == TriggerRule.Kind.ONCE else ""
        return data


class RunNowForm(forms.Form):
    slot = forms.CharField(
        required=False,
        label=gettext_lazy("Slot"),
        help_text=gettext_lazy("Wall time in the rule's zone, e.g. 2026-12-01 09:00. Empty: this minute."),
    )
    biz_key = forms.CharField(
        required=False,
        max_length=255,
        label=gettext_lazy("Business key"),
        help_text=gettext_lazy("Instead of a slot: run exactly this business key."),
    )
    reason = forms.CharField(
        required=False, label=gettext_lazy("Reason"), widget=forms.Textarea(attrs={"rows": 2, "cols": 60})
    )

    def __init__(self, *args, rule: TriggerRule, **kwargs):
        super().__init__(*args, **kwargs)
        self.rule = rule

    def clean_slot(self):
        text = self.cleaned_data["slot"]
        if not text:
            return None
        try:
            return parse_slot(text, self.rule.timezone)
        except schedule.ScheduleError as exc:
            raise forms.ValidationError(
                _("The rule's zone is invalid: %(error)s") % {"error": sentences.schedule_error(exc)}
            ) from exc

    def clean(self):
        super().clean()
        data = self.cleaned_data
        if data.get("slot") and data.get("biz_key"):
            raise forms.ValidationError(_("Give a slot or a business key, not both."))
        return data


class BackfillForm(forms.Form):
    start = forms.DateField(
        label=gettext_lazy("Start"), help_text=gettext_lazy("First local date (rule's zone), e.g. 2026-11-01.")
    )
    end = forms.DateField(
        label=gettext_lazy("End"),
        help_text=format_lazy(
            gettext_lazy("Last local date, inclusive. At most {max} slots in all."), max=MAX_BACKFILL_RUNS
        ),
    )
    spacing = forms.IntegerField(
        min_value=0,
        max_value=3600,
        initial=int(DEFAULT_BACKFILL_SPACING.total_seconds()),
        label=gettext_lazy("Spacing"),
        help_text=gettext_lazy("Seconds between the runs becoming due, so the backfill does not flood the workers."),
    )
    reason = forms.CharField(
        required=False, label=gettext_lazy("Reason"), widget=forms.Textarea(attrs={"rows": 2, "cols": 60})
    )
