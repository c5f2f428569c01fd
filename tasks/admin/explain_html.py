"""Explain on the admin page: the same Reasons and sentences as the API and the CLI (the catalogue,
tasks/sentences.py), with the run, the decision and the nearest slots as links and every time on
the desk's clock."""

from datetime import datetime

from django.urls import reverse
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import SafeString, mark_safe

from harness_site.templatetags.harness import when_html
from tasks import sentences
from tasks.models import TriggerRule
from tasks.rules.explain import DecisionRef, RunRef, SlotRef
from tasks.rules.reasons import Reason
from tasks.triggers.explain import Explanation


def explain_sentence(request, rule: TriggerRule, found: Explanation, slot: datetime | None) -> SafeString:
    """What happened to the slot (or the trigger), as one escaped sentence with links."""
    what = (
        when_html(request, slot, rule.timezone)
        if slot is not None
        else format_html("<code>{}</code>", found.result.get("biz_key"))
    )

    def value(v):
        if isinstance(v, Reason | list | tuple):
            return None  # worded by the catalogue, each part through here again
        if isinstance(v, RunRef):
            return format_html('<a href="{}">#{}</a>', reverse("admin:runs_taskrun_change", args=[v.id]), v.id)
        if isinstance(v, DecisionRef):
            return format_html('<a href="{}">{}</a>', reverse("admin:runs_decision_change", args=[v.id]), v.label)
        if isinstance(v, SlotRef):
            url = reverse("admin:tasks_triggerrule_explain", args=[rule.pk]) + "?slot="
            url += v.at.isoformat().replace("+", "%2B")
            return format_html('<a href="{}">{}</a>', url, when_html(request, v.at, rule.timezone))
        if isinstance(v, datetime):
            return when_html(request, v, rule.timezone)
        return conditional_escape(v)

    # The catalogue's sentence is ours; every value in it was escaped or built above.
    said = mark_safe(sentences.say_all(found.said, value=value))
    return format_html("{}: {}", what, said)
