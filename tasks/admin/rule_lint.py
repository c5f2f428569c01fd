"""The rule's lint checklist on the desk: the facts tasks.rules.lint needs (observed p99, flags
seen, watermarks), and the checklist and list column in the user's language."""

from datetime import date

from django.utils import timezone
from django.utils.html import format_html, format_html_join

from deadletters.alerts import ALERT_FIELDS
from runs.models import Backpressure
from tasks import sentences
from tasks.models import ReadinessFlag, TriggerRule
from tasks.models.pool import GLOBAL_POOL
from tasks.rules import business_days, lint

ICON = {lint.PASS: "✔", lint.WARN: "⚠", lint.FAIL: "✘"}


def lint_input(rule: TriggerRule, p99: float | None) -> lint.LintInput:
    depends = tuple(f for f in (rule.depends_on or []) if isinstance(f, str))
    return lint.LintInput(
        timezone=rule.timezone,
        dedupe_key_template=rule.dedupe_key_template,
        params=rule.params if isinstance(rule.params, dict) else {},
        max_attempts=rule.max_attempts,
        max_retry_window_seconds=rule.max_retry_window_seconds,
        max_delay_seconds=rule.max_delay_seconds,
        jitter_min=rule.jitter_min,
        jitter_max=rule.jitter_max,
        catchup_max_delay_seconds=rule.catchup_max_delay_seconds,
        lease_ttl_seconds=rule.lease_ttl_seconds,
        skill_p99_seconds=p99,
        alert_fields=ALERT_FIELDS,
        depends_on=depends,
        kind=rule.kind,
        event_key_by_date=rule.event_key_by_date,
        flags_seen=frozenset(
            ReadinessFlag.objects.filter(name__in=depends).values_list("name", flat=True) if depends else ()
        ),
        recoverability=rule.recoverability,
        object_key_template=rule.object_key_template,
        coalesce_window_seconds=rule.coalesce_window_seconds or 0,
        watermarks=rule_watermarks(rule),
        **calendar_lint(rule, today=timezone.now().date()),
    )


def calendar_lint(rule: TriggerRule, *, today: date) -> dict:
    """The lint's calendar facts: name, library, and the first date ahead it has no data for."""
    cal = rule.business_days
    if cal is None:
        return {}
    return {
        "calendar": cal.name,
        "calendar_source": cal.source,
        "calendar_until": today + business_days.DEFAULT_HORIZON,
        "calendar_gap": business_days.calendar_gap(cal, today=today),
        # With the law's holidays to go by (mainland China), its uncertain days follow the policy.
        "calendar_uncertain": cal.uncertain if cal.guess is not None else "",
        "today": today,
        "days_limited": bool((rule.weekdays or "").strip()) or _cron_weekdays(rule.cron) != "*",
    }


def _cron_weekdays(cron: str) -> str:
    fields = (cron or "").split()
    return fields[4] if len(fields) == 5 else "*"


def rule_watermarks(rule: TriggerRule) -> tuple[tuple[str, int | None, int | None], ...]:
    """(scope, high, low) of the global pool and of the rule's pools that have a watermark row."""
    rows = Backpressure.objects.select_related("pool").filter(pool__name=GLOBAL_POOL)
    if rule.pk is not None:
        rows = rows | Backpressure.objects.select_related("pool").filter(pool__in=rule.pools.all())
    return tuple((r.pool.name, r.high_watermark, r.low_watermark) for r in rows.order_by("pool__name"))


def checklist_html(items: list[lint.LintItem]) -> str:
    rows = format_html_join(
        "",
        '<li class="lint-{}"><strong>{} {}</strong>: {}</li>',
        ((i.status, ICON[i.status], sentences.lint_check(i), sentences.lint_message(i)) for i in items),
    )
    return format_html('<ul id="rule-lint" class="rule-lint">{}</ul>', rows)


def column_html(items: list[lint.LintItem]) -> str:
    summary = lint.lint_summary(items)
    return format_html(
        '<span class="lint-{}">{} {}</span>', summary.status, ICON[summary.status], sentences.lint_summary(summary)
    )
