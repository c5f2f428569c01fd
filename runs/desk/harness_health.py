"""Is the harness itself well? The facts /healthz reports and the desk's system banner shows, read
once here (database only, a fixed number of queries: the banner is on every desk page).

`health_figures` reads the figures; `banner_facts` (pure) turns them into what is wrong, one
sentence each with the page that explains it. A fact is gone as soon as its figure is.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.urls import reverse
from django.utils.timesince import timesince
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from deadletters.alert_health import able_channels
from runs.desk.selectors import scheduler_health
from runs.engine.workers import WorkerRow, worker_health, workers_older_than_schema
from tasks import sentences
from tasks.models.calendar import calendar_gaps
from tasks.rules import lint
from tasks.rules.reasons import Reason

# A worker that reports one of these is taking work from its queues.
CONSUMING = frozenset({"ok", "restarted"})


def queues_without_worker(workers: list[WorkerRow]) -> list[str]:
    """The task queues no consuming worker reads (every one of them with no worker at all)."""
    served = {q for w in workers if w["status"] in CONSUMING and not w["stopping"] for q in w["queue_list"]}
    return sorted(q for q in settings.CELERY_TASK_QUEUES if q not in served)


def health_figures(*, now: datetime) -> dict[str, Any]:
    """The database's view of the harness, for /healthz and the banner: the scheduler's figures
    (runs.desk.selectors.scheduler_health: ok, reason, code, ...), `workers`, `queues_without_worker`,
    `alerts_log_only` (no enabled channel can deliver), `calendars_without_data` and
    `workers_older_than_schema`. Raises DatabaseError when the database cannot answer."""
    figures = scheduler_health(now=now)
    workers = worker_health(now=now)
    figures["workers"] = workers["workers"]
    figures["worker_code"], figures["worker_reason"] = workers["code"], workers["reason"]
    figures["queues_without_worker"] = queues_without_worker(workers["workers"])
    figures["alerts_log_only"] = not able_channels()
    # Weeks ahead, not an outage: named and alerted, but never a 503.
    figures["calendars_without_data"] = calendar_gaps(today=now.date())
    figures["workers_older_than_schema"] = workers_older_than_schema(now=now)  # name, release, schema
    return figures


def _age(seconds: float, *, now: datetime) -> str:
    """How long, as people say it: seconds for the first two minutes (an outage is young), then
    Django's "3 minutes", "1 hour, 5 minutes"."""
    if seconds < 120:
        n = int(seconds)
        return ngettext("%(n)s second", "%(n)s seconds", n) % {"n": n}
    return timesince(now - timedelta(seconds=seconds), now)


@dataclass(frozen=True)
class Fact:
    code: str  # scheduler_stalled, slot_overdue, queue_without_worker, alerts_log_only, ...
    sentence: str  # in the request's language
    url: str  # the page that explains it
    link: str  # that link's words


def banner_facts(figures: dict[str, Any], *, now: datetime) -> list[Fact]:
    """What is wrong with the harness itself, worst first, one sentence each ([] when nothing is)."""
    facts = []
    dashboard = reverse("harness-dashboard")
    if figures["code"] == "scheduler_stalled":
        tick = figures["last_tick_at"]
        sentence = (
            _("The scheduler has not ticked for %(age)s: no rule fires until it runs again.")
            % {"age": _age((now - tick).total_seconds(), now=now)}
            if tick
            else _("The scheduler has never ticked: no rule fires until it runs.")
        )
        facts.append(Fact("scheduler_stalled", sentence, dashboard + "#dash-scheduler", _("Scheduler")))
    elif figures["code"] == "slot_overdue":
        age = figures["oldest_unclaimed_slot_age_seconds"] or 0
        facts.append(
            Fact(
                "slot_overdue",
                _("A slot of rule %(rule)s is %(age)s overdue: the scheduler is not keeping up.")
                % {"rule": figures["oldest_unclaimed_slot_rule"], "age": _age(age, now=now)},
                reverse("harness-status") + "?health=overdue",
                _("Overdue rules"),
            )
        )
    for queue in figures["queues_without_worker"]:
        facts.append(
            Fact(
                "queue_without_worker",
                _("No worker is taking work from the queue %(queue)s: its runs wait.") % {"queue": queue},
                dashboard + "#dash-workers",
                _("Workers"),
            )
        )
    for worker in figures["workers_older_than_schema"]:
        facts.append(
            Fact(
                "worker_older_than_schema",
                _(
                    "Worker %(worker)s runs release %(release)s; the schema is at %(schema)s: "
                    "restart it on the new release."
                )
                % {"worker": worker["name"], "release": worker["release"], "schema": worker["schema"]},
                dashboard + "#dash-workers",
                _("Workers"),
            )
        )
    if figures["alerts_log_only"]:
        facts.append(
            Fact(
                "alerts_log_only",
                _("No alert channel can deliver: alerts reach only the log."),
                reverse("admin:deadletters_alertchannel_changelist"),
                _("Alert channels"),
            )
        )
    for gap in figures["calendars_without_data"]:
        facts.append(
            Fact(
                "calendar_without_data",
                calendar_sentence(gap),
                reverse("admin:tasks_businesscalendar_change", args=[gap["id"]]),
                _("Calendar"),
            )
        )
    return facts


def calendar_sentence(gap: dict[str, Any]) -> str:
    """What a calendar running out of data means for its rules: past its data a calendar counts
    every weekday as a business day, unless the law still fixes the holidays (mainland China) and
    the calendar's policy decides the days a notice would move."""
    values = {"calendar": gap["calendar"], "date": gap["no_data_from"], "days": gap["days_left"]}
    if gap.get("uncertain_days"):
        return _(
            "The business calendar %(calendar)s has no notice from %(date)s (%(days)s days left): "
            "from then on its rules skip the holidays the law fixes, and on the days the notice may move "
            "%(uncertain)s."
        ) % {**values, "uncertain": sentences.say(Reason.of(lint.UNCERTAIN_POLICY[gap["uncertain_days"]]))}
    return (
        _(
            "The business calendar %(calendar)s has no data from %(date)s (%(days)s days left): "
            "from then on it knows no holiday and its rules run on every weekday."
        )
        % values
    )
