"""The one catalogue of sentences for what the pure layer says (tasks.rules returns Reasons: a
code and its parameters). Each code has one English source string here, marked for gettext, and
its zh-Hans translation in harness_site/locale; the admin, the API and the CLI all word a reason
through `say`, so a sentence is written once and translated once.

It sits beside tasks.rules, not in it: tasks.rules is kept free of Django (import-linter), and
gettext is Django's. It imports nothing but tasks.rules and Django's translation, so every layer
that shows text (models' validation, triggers, admin, API, CLI) may use it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from cron_descriptor import ExpressionDescriptor, FormatException, Options
from django.utils.dateparse import parse_datetime
from django.utils.formats import date_format
from django.utils.text import capfirst
from django.utils.translation import get_language, gettext_lazy
from django.utils.translation import gettext as _

from tasks.rules import backpressure, evaluation, guards, lint, objectives, preview, schedule, spread
from tasks.rules import explain as explained
from tasks.rules import plan as planned
from tasks.rules.reasons import Reason

# Mainland China's public holidays as chinese-calendar names them (English), in the user's language.
HOLIDAY_NAMES = {
    "New Year's Day": gettext_lazy("New Year's Day"),
    "Spring Festival": gettext_lazy("Spring Festival"),
    "Tomb-sweeping Day": gettext_lazy("Tomb-sweeping Day"),
    "Labour Day": gettext_lazy("Labour Day"),
    "Dragon Boat Festival": gettext_lazy("Dragon Boat Festival"),
    "Mid-autumn Festival": gettext_lazy("Mid-autumn Festival"),
    "National Day": gettext_lazy("National Day"),
    # chinese-calendar's name for the extra day off on 3 September 2015, for old dates.
    "Anti-Fascist 70th Day": gettext_lazy("Anti-Fascist 70th Day"),
}

# A reason's parameters that are lists are joined so.
LIST_SEPARATOR = "; "

CATALOGUE = {
    # --- schedule refusals (a ScheduleError names its field; these say what is wrong with it) ---
    schedule.TIMEZONE_REQUIRED: gettext_lazy('is required: give an IANA zone name such as "Europe/Berlin"'),
    schedule.TIMEZONE_UNKNOWN: gettext_lazy(
        '%(name)s is not a known zone: use an IANA zone name such as "Europe/Berlin"'
    ),
    schedule.TIMEZONE_UNKNOWN_HINT: gettext_lazy(
        '%(name)s is not a known zone: use an IANA zone name such as "Europe/Berlin"; did you mean "%(hint)s"?'
    ),
    schedule.TIMEZONE_UNLOADABLE: gettext_lazy("%(name)s cannot be loaded (%(error)s)"),
    schedule.CRON_REQUIRED: gettext_lazy('is required, e.g. "0 9 * * *"'),
    schedule.CRON_MACRO: gettext_lazy("%(macro)s is not supported"),
    schedule.CRON_MACRO_ALTERNATIVE: gettext_lazy('%(macro)s is not supported; write "%(cron)s" instead'),
    schedule.CRON_FIELD_COUNT: gettext_lazy(
        "%(expr)s has %(n)s fields; only 5-field cron is accepted (minute hour day-of-month month day-of-week)"
    ),
    schedule.CRON_FIELD_COUNT_SECONDS: gettext_lazy(
        "%(expr)s has %(n)s fields; only 5-field cron is accepted (minute hour day-of-month month day-of-week); "
        "for sub-minute schedules use an interval rule"
    ),
    schedule.CRON_NOT_A_VALUE: gettext_lazy("%(expr)s is invalid (a field is not a cron value)"),
    schedule.CRON_NEVER_FIRES: gettext_lazy("%(expr)s never fires"),
    schedule.CRON_INVALID: gettext_lazy("%(expr)s is invalid (%(error)s)"),
    schedule.CRON_DAY_NEVER: gettext_lazy("day-of-month %(value)s never occurs in month %(month)s"),
    schedule.CRON_BAD_FIELD: gettext_lazy("bad %(field)s field %(value)s (allowed: %(allowed)s) [%(error)s]"),
    schedule.NOT_ONE_OF: gettext_lazy("%(value)s is not one of %(allowed)s"),
    schedule.INTERVAL_TOO_SMALL: gettext_lazy("must be a whole number >= 1, not %(value)s"),
    schedule.INTERVAL_TOO_LARGE: gettext_lazy("must be at most %(max)s (ten years), not %(value)s"),
    schedule.RUN_AT_NAIVE: gettext_lazy("must be an aware datetime (with a timezone)"),
    schedule.RUN_AT_OUT_OF_RANGE: gettext_lazy("is out of range: give an instant between year 1 and 9999-12-31 UTC"),
    # --- what DST did to a slot ---
    schedule.DST_GAP_SHIFTED: gettext_lazy("DST gap: %(wall)s does not exist, shifted to %(local)s"),
    schedule.DST_GAPS_SHIFTED: gettext_lazy("DST gap: %(walls)s do not exist, shifted to %(local)s"),
    schedule.DST_GAP_SKIPPED: gettext_lazy("DST gap: %(wall)s does not exist, skipped"),
    schedule.DST_REPEAT_FIRST: gettext_lazy("DST repeat: first of two %(wall)s"),
    schedule.DST_REPEAT_SECOND: gettext_lazy("DST repeat: second of two %(wall)s"),
    # --- what the static guards do to a slot ahead ---
    evaluation.SLOT_RUNS: gettext_lazy("runs"),
    evaluation.SLOT_RUNS_IF_READY: gettext_lazy("runs (if %(flags)s ready)"),
    evaluation.SLOT_DEFERRED: gettext_lazy("deferred to %(local)s"),
    evaluation.SLOT_EXCLUDED_DATE: gettext_lazy("no run: calendar (excluded date %(date)s)"),
    evaluation.SLOT_WEEKDAY: gettext_lazy("no run: calendar (weekday %(weekday)s not allowed)"),
    evaluation.SLOT_OUTSIDE_HOURS: gettext_lazy("no run: outside business hours %(hours)s"),
    evaluation.SLOT_NO_OPENING: gettext_lazy("no run: no business-hours opening (%(hours)s)"),
    evaluation.SLOT_START_WINDOW: gettext_lazy("no run: start window passed"),
    evaluation.SLOT_PAUSED: gettext_lazy("paused: will not run while the rule is paused"),
    # --- what a business calendar does to a slot's date ---
    evaluation.SLOT_HOLIDAY: gettext_lazy("no run: %(date)s: %(name)s (calendar %(calendar)s)"),
    evaluation.SLOT_WEEKEND: gettext_lazy("no run: %(date)s is a weekend day (calendar %(calendar)s)"),
    evaluation.SLOT_CLOSED: gettext_lazy("no run: %(date)s is closed: %(name)s (calendar %(calendar)s)"),
    evaluation.SLOT_NO_DATA_CLOSED: gettext_lazy(
        "no run: %(date)s is a weekend day; calendar %(calendar)s has no data for it yet"
    ),
    evaluation.SLOT_MAKEUP: gettext_lazy("%(runs)s: %(date)s is a make-up working day (%(name)s)"),
    evaluation.SLOT_OPENED: gettext_lazy("%(runs)s: %(date)s is an extra working day (%(name)s)"),
    evaluation.SLOT_NO_DATA_OPEN: gettext_lazy(
        "%(runs)s as an ordinary weekday: calendar %(calendar)s has no data for %(date)s yet"
    ),
    evaluation.SLOT_LAW_HOLIDAY: gettext_lazy(
        "no run: %(date)s: %(name)s, a holiday fixed by law (calendar %(calendar)s has no notice for the year yet)"
    ),
    evaluation.SLOT_MAY_BE_OFF: gettext_lazy(
        "%(runs)s: %(date)s may become a day off of %(name)s; calendar %(calendar)s has no notice for the year yet"
    ),
    evaluation.SLOT_MAY_BE_MAKEUP: gettext_lazy(
        "%(runs)s: %(date)s may become a make-up working day of %(name)s; "
        "calendar %(calendar)s has no notice for the year yet"
    ),
    evaluation.SLOT_UNCERTAIN_RUN: gettext_lazy("%(runs)s (the calendar runs uncertain days)"),
    evaluation.SLOT_UNCERTAIN_SKIP: gettext_lazy("no run (the calendar skips uncertain days)"),
    evaluation.SLOT_UNCERTAIN_HOLD: gettext_lazy("%(runs)s once approved (the calendar holds uncertain days)"),
    # --- guard settings the rule form refuses ---
    evaluation.BAD_WEEKDAYS: gettext_lazy(
        '"%(part)s" is not a weekday or range; write e.g. "mon-fri" or "mon,wed,fri"'
    ),
    evaluation.DATES_NOT_A_LIST: gettext_lazy('must be a JSON list of dates, e.g. ["2026-12-25"]'),
    evaluation.BAD_DATE: gettext_lazy('%(item)s is not a date; write YYYY-MM-DD, e.g. "2026-12-25"'),
    guards.KEY_TEMPLATE: gettext_lazy("%(error)s"),
    guards.HOURS_BOTH: gettext_lazy("Give both business-hours start and end, or neither."),
    guards.HOURS_ORDER: gettext_lazy("Business hours must end after they start on the same day (e.g. 09:00-17:00)."),
    guards.FLAGS_NOT_A_LIST: gettext_lazy('A JSON list of flag names, e.g. ["pipeline.raw_data.ready"].'),
    guards.FLAG_NAME_TOO_LONG: gettext_lazy("Flag names are at most %(max)s characters."),
    guards.DEADLINE_NEEDED: gettext_lazy(
        "The wait policy needs a local deadline (e.g. 12:00) after which the slot expires."
    ),
    guards.SNAPSHOT_NOT_A_LIST: gettext_lazy('A JSON list of param names, e.g. ["threshold"].'),
    guards.SNAPSHOT_UNKNOWN_PARAM: gettext_lazy("%(name)s is not a param of this rule; params: %(params)s."),
    guards.CATCHUP_COUNT_ZERO: gettext_lazy("A max count of 0 would catch up nothing; use catch-up none instead."),
    guards.IDENTITY_DISABLED: gettext_lazy("Identity %(identity)s is disabled."),
    guards.IDENTITY_FORBIDS_SKILL: gettext_lazy("Identity %(identity)s may not run %(skill)s (allowed: %(allowed)s)."),
    # --- backpressure watermarks that cannot work ---
    backpressure.LOW_WITHOUT_HIGH: gettext_lazy("A low watermark needs a high watermark above it."),
    backpressure.HIGH_BELOW_ONE: gettext_lazy("The high watermark must be at least 1 (leave it blank to never shed)."),
    backpressure.LOW_ABOVE_HIGH: gettext_lazy(
        "The low watermark (%(low)s) must not be above the high watermark (%(high)s)."
    ),
    # --- the schedule preview ---
    preview.EVERY_N_SECONDS: gettext_lazy("Every %(n)s seconds (aligned to UTC, so DST never moves it)"),
    preview.ONCE_AT: gettext_lazy("Once at %(local)s = %(utc)s"),
    preview.ONCE_PAST: gettext_lazy("Once at %(local)s = %(utc)s: already past, so it will not run."),
    preview.HEARTBEAT_DEADLINE: gettext_lazy("if no ping arrives before"),
    preview.ON_HEARTBEAT: gettext_lazy("Heartbeat: alert when no ping arrives in time"),
    preview.ON_EVENTS: gettext_lazy("On events"),
    preview.CLOCKS_FORWARD_SHIFT: gettext_lazy(
        "%(when)s: clocks go forward (UTC%(old)s → UTC%(new)s); wall times in the gap are shifted to the first "
        "valid time after the gap."
    ),
    preview.CLOCKS_FORWARD_SKIP: gettext_lazy(
        "%(when)s: clocks go forward (UTC%(old)s → UTC%(new)s); wall times in the gap are skipped."
    ),
    preview.CLOCKS_BACK: gettext_lazy(
        "%(when)s: clocks go back (UTC%(old)s → UTC%(new)s); a repeated wall time runs: %(repeat)s occurrence(s)."
    ),
    preview.NO_DST_CHANGE: gettext_lazy("%(zone)s has no DST change in the next year."),
    preview.FROM_NOT_A_DATE: gettext_lazy("a date written YYYY-MM-DD, e.g. 2027-02-05"),
    preview.FROM_OUT_OF_RANGE: gettext_lazy("a date from the year %(first)s to %(last)s"),
    # --- explain: why did or didn't it run ---
    explained.NOT_A_DATETIME: gettext_lazy(
        "%(text)s is not a date-time; write e.g. 2026-12-01T08:00 (read in %(zone)s) or 2026-12-01T08:00:00+01:00"
    ),
    explained.RAN: gettext_lazy("ran: run %(run)s (%(state)s), source %(source)s, biz_key %(biz_key)s"),
    explained.AWAITING_APPROVAL: gettext_lazy(
        "waiting for operator approval: run %(run)s (catch-up above the approval threshold)"
    ),
    explained.AWAITING_APPROVAL_FOR: gettext_lazy("waiting for operator approval: run %(run)s (%(why)s)"),
    explained.HELD_CATCHUP: gettext_lazy("a catch-up burst above the rule's approval threshold"),
    explained.HELD_UNCERTAIN_DAY: gettext_lazy(
        "%(date)s is an uncertain day: calendar %(calendar)s has no notice for the year yet and holds such days"
    ),
    explained.HELD_ACTION: gettext_lazy("a proposed action needs a person's decision"),
    explained.LAST_ERROR: gettext_lazy("%(error)s"),
    explained.STARTS_AT: gettext_lazy("starts at %(at)s (deferred or paced)"),
    explained.NOT_STARTED: gettext_lazy("run %(run)s not started yet, %(waiting)s"),
    explained.DID_NOT_RUN: gettext_lazy("did not run: %(decision)s"),
    explained.DID_NOT_RUN_WHY: gettext_lazy("did not run: %(decision)s (%(why)s)"),
    explained.SHED: gettext_lazy(
        "%(pending)s pending runs in %(pool)s at or above the high watermark %(high)s, shedding until %(low)s; "
        "the rule is %(recoverability)s"
    ),
    explained.LATE_TICK: gettext_lazy(
        "no scheduler tick reached this slot until %(late)s s after its time, at %(at)s: the scheduler was "
        "down or stalled until then"
    ),
    explained.CATCHUP_OFF: gettext_lazy("catch-up is off for this rule (none): a late slot is recorded, not run"),
    explained.CATCHUP_TOO_LATE: gettext_lazy(
        "it was %(late)s s late, beyond the catch-up max delay of %(max_delay)s s"
    ),
    explained.CATCHUP_LATEST_ONLY: gettext_lazy("catch-up latest runs only the most recent late slot"),
    explained.CATCHUP_CAPPED_AT: gettext_lazy("catch-up all runs only the %(n)s most recent late slots of an outage"),
    explained.PAUSED_NOW: gettext_lazy("the rule is paused since %(since)s (no reason recorded)"),
    explained.PAUSED_NOW_WHY: gettext_lazy("the rule is paused since %(since)s (%(why)s)"),
    explained.ANSWERED_SO: gettext_lazy("%(n)s trigger(s) with this key were answered so"),
    explained.WAITING: gettext_lazy("not yet: %(hold)s; next check %(recheck)s"),
    explained.WAITING_UNTIL: gettext_lazy("not yet: %(hold)s; next check %(recheck)s, expires %(deadline)s"),
    explained.NOT_A_SLOT: gettext_lazy("not a slot of this rule"),
    explained.NEAREST_BEFORE: gettext_lazy("nearest before %(slot)s"),
    explained.NEAREST_AFTER: gettext_lazy("nearest after %(slot)s"),
    explained.NOT_DUE: gettext_lazy("not due yet; expected: %(expected)s"),
    explained.NOT_DUE_PAUSED: gettext_lazy(
        "not due yet; expected: paused (will not run while the rule is paused; resuming reads the schedule "
        "again from then)"
    ),
    explained.NOT_DUE_PAUSED_WHY: gettext_lazy(
        "not due yet; expected: paused (will not run while the rule is paused: %(why)s; resuming reads the "
        "schedule again from then)"
    ),
    explained.PAUSED_SINCE: gettext_lazy(
        "did not run: the rule is paused since %(since)s (no reason recorded); resuming records this slot as a "
        '"paused" decision, it is not caught up'
    ),
    explained.PAUSED_SINCE_WHY: gettext_lazy(
        'did not run: the rule is paused since %(since)s (%(why)s); resuming records this slot as a "paused" '
        "decision, it is not caught up"
    ),
    explained.NO_RECORD_SLOT: gettext_lazy(
        "no record: the slot is before the rule's schedule was last set (created, edited or resumed), or its "
        "decision is older than the retention period"
    ),
    explained.COALESCED: gettext_lazy(
        "coalesced: run %(run)s was replaced before it started by a newer trigger of object %(object)s; run "
        "%(survivor)s (%(survivor_key)s, %(state)s) carries the work with the newest payload"
    ),
    explained.COALESCED_AWAY: gettext_lazy(
        "coalesced: run %(run)s was replaced before it started by a newer trigger of object %(object)s; a newer "
        "run carries the work with the newest payload"
    ),
    explained.TRIGGER_RAN: gettext_lazy(
        "ran: run %(run)s (%(state)s), source %(source)s, triggered by %(triggered_by)s"
    ),
    explained.DEDUPE_HITS: gettext_lazy("%(n)s later trigger(s) were dedupe hits on it"),
    explained.NO_RECORD_TRIGGER: gettext_lazy(
        "no record: no trigger with this business key reached this rule, or its record is older than the "
        "retention period (a refused event is in the event refusals)"
    ),
    # --- the plan of a rule change (tasks/rules/plan.py) ---
    planned.OUTCOME_RUN: gettext_lazy("runs"),
    planned.OUTCOME_CATCHUP: gettext_lazy("runs (catch-up)"),
    planned.OUTCOME_FAIL: gettext_lazy("fails (dependencies not ready, fail policy)"),
    planned.OUTCOME_WAITING: gettext_lazy("waiting (not decided yet)"),
    planned.OUTCOME_PENDING: gettext_lazy("not decided yet (after the last tick)"),
    planned.OUTCOME_UNKNOWN: gettext_lazy("unknown"),
    planned.OUTCOME_NONE: gettext_lazy("not a slot"),
    planned.UNKNOWN_BEFORE_RECORDS: gettext_lazy("the records of this rule begin at %(since)s"),
    planned.UNKNOWN_BEFORE_SCHEDULE: gettext_lazy(
        "before %(since)s another schedule of this rule was in force: its slots are not compared"
    ),
    planned.UNKNOWN_TICK: gettext_lazy(
        "no tick is recorded between %(after)s and %(before)s: an outage may have begun in that time"
    ),
    planned.UNKNOWN_FLAG: gettext_lazy(
        "flag %(flags)s is not set now; whether it was set then is not recorded (clearing a flag keeps no record)"
    ),
    planned.BURST: gettext_lazy(
        "%(n)s due slot(s), %(first)s to %(last)s, would run at once on the next tick (catch-up burst)"
    ),
    planned.KEY_SHAPE: gettext_lazy(
        "the dedupe key changes shape: %(old)s becomes %(new)s, so a slot that already ran could run again"
    ),
    planned.DAY_AGAIN: gettext_lazy(
        "business day %(day)s already ran under another key; it would run again as %(key)s"
    ),
    planned.IDENTITY: gettext_lazy("the executing identity changes from %(old)s to %(new)s (its grants change)"),
    planned.AGENT: gettext_lazy("the agent changes from %(old)s to %(new)s (its model key and secret grant change)"),
    planned.NO_CHANGE: gettext_lazy("no change: the rule is saved as it is"),
    planned.NOT_SCHEDULED: gettext_lazy("a %(kind)s rule has no slots of its own: nothing to replay or preview"),
    planned.OVERLAP_NOT_REPLAYED: gettext_lazy(
        "the overlap policy is not replayed: which runs were active at each slot is not recorded"
    ),
    planned.TRUNCATED: gettext_lazy("only the first %(n)s slots are planned"),
    planned.SAME_FUTURE: gettext_lazy("the next %(days)s days fire the same, with the same guards"),
    planned.FIRST_DIFFERENCE: gettext_lazy("the fires first differ on %(day)s"),
    planned.PAST_DIFFERS: gettext_lazy("%(n)s of %(total)s past slots would have gone otherwise"),
    planned.PAST_SAME: gettext_lazy("all %(total)s past slots would have gone the same"),
    # --- freshness objectives: what holds a slot (the cause of its status) ---
    objectives.CAUSE_NOT_CLAIMED: gettext_lazy("slot due since %(since)s, not yet taken by the scheduler"),
    objectives.CAUSE_WAITING_READY: gettext_lazy("waiting for readiness flag %(flags)s (not set since %(since)s)"),
    objectives.CAUSE_WAITING_OVERLAP: gettext_lazy("buffered behind an active run of this rule since %(since)s"),
    objectives.CAUSE_WAITING_POOL: gettext_lazy("pool %(pool)s full (%(in_use)s of %(limit)s), %(ahead)s runs ahead"),
    objectives.CAUSE_WAITING_RATE: gettext_lazy("pool %(pool)s paces its starts; next start at %(until)s"),
    objectives.CAUSE_AWAITING_APPROVAL: gettext_lazy("run held for operator approval"),
    objectives.CAUSE_QUEUED: gettext_lazy("queued, may start at %(at)s"),
    objectives.CAUSE_QUEUE_STALLED: gettext_lazy("no worker has consumed queue %(queue)s for %(minutes)s min"),
    objectives.CAUSE_QUEUE_NO_WORKER: gettext_lazy("no worker consumes queue %(queue)s"),
    objectives.CAUSE_RETRYING: gettext_lazy("attempt %(attempt)s of %(max)s failed with %(kind)s; next try %(next)s"),
    objectives.CAUSE_RUNNING: gettext_lazy("running for %(seconds)s s (usually %(usual)s s)"),
    objectives.CAUSE_OVERRUN: gettext_lazy("running for %(seconds)s s, over its usual %(usual)s s"),
    objectives.CAUSE_SCHEDULER_DOWN: gettext_lazy(
        "the scheduler has not ticked since %(since)s (paged once, as the scheduler-stalled alert)"
    ),
    objectives.CAUSE_NOT_STARTED: gettext_lazy("not started by %(by)s: %(cause)s"),
    objectives.CAUSE_FAILED: gettext_lazy("attempt %(attempt)s of %(max)s failed with %(kind)s; no retry left"),
    objectives.CAUSE_NOT_RUN: gettext_lazy("did not run: %(decision)s"),
    objectives.CAUSE_PAUSED: gettext_lazy("rule paused at %(at)s"),
    objectives.CAUSE_PAUSED_BY: gettext_lazy("rule paused by %(actor)s at %(at)s: '%(why)s'"),
    objectives.CAUSE_FINISHED: gettext_lazy("finished at %(at)s"),
    objectives.CAUSE_FINISHED_LATE: gettext_lazy("finished at %(at)s, %(minutes)s min late"),
    spread.NOT_SHORTER_THAN_INTERVAL: gettext_lazy(
        "A spread of %(spread)s s must be shorter than the interval (%(gap)s s), "
        "so a start never reaches the next slot."
    ),
    spread.NOT_SHORTER_THAN_GAP: gettext_lazy(
        "A spread of %(spread)s s must be shorter than the schedule's shortest gap between two slots "
        "(%(gap)s s, from %(at)s), so a start never reaches the next slot."
    ),
    spread.NOT_SHORTER_THAN_START_WINDOW: gettext_lazy(
        "A spread of %(spread)s s must be shorter than the start window (%(window)s s), or late starts "
        "would be cancelled."
    ),
    spread.NEGATIVE: gettext_lazy("The spread cannot be negative."),
    spread.SECONDS: gettext_lazy("spread %(n)s s"),
    spread.SECONDS_FROM_POOL: gettext_lazy("spread %(n)s s, the default of pool %(pool)s"),
    spread.DUE_STARTED: gettext_lazy("due %(slot)s, started %(started)s (%(spread)s)"),
    spread.DUE_STARTS: gettext_lazy("due %(slot)s, starts %(start)s (%(spread)s)"),
    spread.STARTS: gettext_lazy("starts %(start)s (%(spread)s)"),
    spread.STARTS_BETWEEN: gettext_lazy("starts between %(first)s and %(last)s (%(spread)s, random)"),
    spread.MOVED_STARTS: gettext_lazy(
        "spread %(old)s s → %(new)s s: starts move within their slots; slots, keys and business dates stay"
    ),
    objectives.OFFSET_NEEDED: gettext_lazy("Give the offset in seconds after the slot, e.g. 1800 for 30 minutes."),
    objectives.WALL_NEEDED: gettext_lazy("Give the local time of day the work must be done by, e.g. 09:30."),
    objectives.NEEDS_OBJECTIVE: gettext_lazy("Set a freshness objective first; this is measured from its deadline."),
    objectives.WITHIN_OFFSET: gettext_lazy("Must be shorter than the objective's offset (%(seconds)s s)."),
    objectives.NEEDS_SCHEDULE: gettext_lazy(
        "Only scheduled rules (cron, interval, one time) have slots to keep a freshness objective for."
    ),
    # --- the lint checklist: each check's name, then what it found ---
    lint.CHECK_TIMEZONE: gettext_lazy("timezone explicit"),
    lint.CHECK_DEPENDENCIES: gettext_lazy("dependencies have a source"),
    lint.CHECK_DEDUPE_KEY: gettext_lazy("dedupe key per business unit"),
    lint.CHECK_RETRIES: gettext_lazy("retries capped with jitter"),
    lint.CHECK_CATCHUP: gettext_lazy("catch-up window set"),
    lint.CHECK_LEASE: gettext_lazy("lease TTL above p99 duration"),
    lint.CHECK_ALERT: gettext_lazy("alert carries run id and biz_key"),
    lint.CHECK_BACKPRESSURE: gettext_lazy("backpressure class fits"),
    lint.CHECK_CALENDAR: gettext_lazy("business calendar has data ahead"),
    lint.TIMEZONE_SET: gettext_lazy("Schedule is read in %(zone)s."),
    lint.TIMEZONE_INVALID: gettext_lazy("%(error)s; the host zone must never decide."),
    lint.NO_DEPENDENCIES: gettext_lazy("No readiness dependencies."),
    lint.FLAGS_NEVER_SET: gettext_lazy(
        "No flag %(flags)s is set for any scope: check that a pipeline, API token or operator sets it, "
        "or every slot will wait until its deadline."
    ),
    lint.FLAGS_SET: gettext_lazy("Flags %(flags)s are set by their producers."),
    lint.KEY_INVALID: gettext_lazy("%(error)s"),
    lint.EVENT_KEY_HAS_DATE: gettext_lazy(
        "{business_date} is the day an event arrived: the same event re-sent after midnight becomes a second "
        'run. Remove it, or tick "event key by date".'
    ),
    lint.EVENT_KEY_BY_DATE: gettext_lazy(
        '"Event key by date" is on: the same event sent again on another day is a new run.'
    ),
    lint.KEY_VARIES: gettext_lazy("Key varies by %(which)s; it is kept under this rule's own namespace."),
    lint.KEY_CONSTANT: gettext_lazy(
        "Key has no date or object placeholder: every slot would share one run. Add {business_date}."
    ),
    lint.RETRIES_UNCAPPED: gettext_lazy("%(problems)s."),
    lint.NO_ATTEMPT_CAP: gettext_lazy("no attempt cap"),
    lint.NO_RETRY_WINDOW: gettext_lazy("no cap on elapsed retry time"),
    lint.NO_DELAY_CAP: gettext_lazy("no cap on one delay"),
    lint.NO_JITTER: gettext_lazy("no jitter (jitter max must exceed jitter min), so failed runs retry in lockstep"),
    lint.RETRIES_CAPPED: gettext_lazy("At most %(n)s attempts within %(window)ss, jitter x%(lo)s-%(hi)s."),
    lint.CATCHUP_SET: gettext_lazy("Slots later than %(n)ss are recorded as missed."),
    lint.CATCHUP_MISSING: gettext_lazy("No catch-up window: set catch-up max delay above 0."),
    lint.P99_UNKNOWN: gettext_lazy("No succeeded run of this skill yet: p99 duration unknown."),
    lint.LEASE_ABOVE_P99: gettext_lazy("Lease %(ttl)ss > p99 %(p99)ss."),
    lint.LEASE_BELOW_P99: gettext_lazy("Lease %(ttl)ss <= p99 %(p99)ss: slow runs lose their lease and run twice."),
    lint.ALERT_LACKS: gettext_lazy("Final-failure alert lacks %(fields)s."),
    lint.ALERT_CARRIES: gettext_lazy("Final-failure alerts carry %(fields)s."),
    lint.WATERMARKS_INVALID: gettext_lazy("Watermarks of %(scope)s: %(errors)s"),
    lint.COALESCE_WITHOUT_OBJECT: gettext_lazy(
        "Coalesce without an object key template: there is no object whose pending run to replace."
    ),
    lint.COALESCE_WINDOW_UNUSED: gettext_lazy("A coalesce window of %(n)ss does nothing unless the class is coalesce."),
    lint.COALESCES: gettext_lazy("Newer triggers of an object replace its pending run."),
    lint.COALESCES_WAITING: gettext_lazy(
        "Newer triggers of an object replace its pending run, waiting %(n)ss for newer ones."
    ),
    lint.RECOMPUTABLE_NO_WATERMARK: gettext_lazy("Recomputable, but no watermark is set: never shed."),
    lint.SHED_ABOVE: gettext_lazy("Shed above the high watermark of pending runs (%(where)s)."),
    lint.WATERMARK_AT: gettext_lazy("%(scope)s at %(high)s"),
    lint.ONE_TIME_INPUT: gettext_lazy("One-time input: never shed."),
    lint.CALENDAR_KNOWN: gettext_lazy("Calendar %(calendar)s (%(source)s) knows every date up to %(until)s."),
    lint.CALENDAR_DAYS_LIMITED: gettext_lazy(
        "Calendar %(calendar)s decides the business days, but the cron's day of week or the weekdays leave days "
        'out: a make-up working day on a weekend will not run. Use a daily cron such as "0 9 * * *" and blank weekdays.'
    ),
    lint.CALENDAR_NO_DATA: gettext_lazy(
        "Calendar %(calendar)s (%(source)s) has no data from %(since)s (in %(days)s days): from then on it knows "
        "no holiday and no make-up working day and counts every weekday as a business day. Upgrade the library "
        "once the next year's holidays are published, or add overrides."
    ),
    lint.CALENDAR_NO_NOTICE: gettext_lazy(
        "Calendar %(calendar)s (%(source)s) has no data from %(since)s (in %(days)s days): from then on it skips "
        "the holidays the law fixes, but cannot know the weekdays the yearly notice bridges into a break or the "
        "weekends it makes working days; on those uncertain days %(uncertain)s. Import the notice once it is "
        "published (harness notice import), or upgrade the library."
    ),
    lint.UNCERTAIN_RUNS: gettext_lazy("its rules run as on an ordinary day"),
    lint.UNCERTAIN_SKIPS: gettext_lazy("its rules do not run"),
    lint.UNCERTAIN_HOLDS: gettext_lazy("its rules' runs wait for an operator's approval"),
}


def say(reason: Reason | None, *, value=None) -> str:
    """The sentence for a reason in the active language; "" for None.

    `value(v)` may word a parameter itself (the admin turns runs and times into links, and
    escapes the rest); it returns None to leave a parameter to the plain words below.
    """
    if reason is None:
        return ""
    template = str(CATALOGUE[reason.code])
    if not reason.params:
        return template
    return template % {name: _value(v, value) for name, v in reason.params.items()}


def say_all(reasons: list[Reason], *, value=None) -> str:
    """Several reasons about one thing, as one sentence."""
    return LIST_SEPARATOR.join(say(r, value=value) for r in reasons)


def _value(v, value=None):
    shown = value(v) if value is not None else None
    if shown is not None:
        return shown
    if isinstance(v, Reason):
        return say(v, value=value)
    if isinstance(v, list | tuple):
        return LIST_SEPARATOR.join(str(_value(item, value)) for item in v)
    if isinstance(v, evaluation.HolidayName):
        return str(HOLIDAY_NAMES.get(v, v))
    if isinstance(v, explained.SlotRef):
        return utc_text(v.at)
    if isinstance(v, datetime):
        return utc_text(v) if v.tzinfo is UTC else local_text(v)
    return v


def reason_dump(reason: Reason | None) -> dict:
    """A Reason as JSON, to store and word later (in the reader's language): instants as ISO text with
    their zone, so they are worded in that zone; a Reason inside one nests."""
    if reason is None:
        return {}
    params: dict = {}
    for name, v in reason.params.items():
        if isinstance(v, datetime):
            params[name] = {"at": v.isoformat(), "zone": str(getattr(v.tzinfo, "key", "UTC"))}
        elif isinstance(v, Reason):
            params[name] = reason_dump(v)
        else:
            params[name] = v
    return {"code": reason.code, "params": params}


def reason_load(data: dict) -> Reason | None:
    """reason_dump's Reason back; None for an empty or unknown record (one written by a later release)."""
    if not isinstance(data, dict) or data.get("code") not in CATALOGUE:
        return None
    params = {}
    for name, v in (data.get("params") or {}).items():
        if isinstance(v, dict) and "at" in v:
            at = parse_datetime(v["at"])
            params[name] = at.astimezone(ZoneInfo(v.get("zone") or "UTC")) if at else v["at"]
        elif isinstance(v, dict) and "code" in v:
            params[name] = reason_load(v)
        else:
            params[name] = v
    return Reason(data["code"], params)


def local_text(local: datetime) -> str:
    """A wall time with its weekday in the user's language: Wed / 周三 2026-12-02 09:00:00 CST (UTC+0800)."""
    return f"{date_format(local, 'D')} {local:%Y-%m-%d %H:%M:%S %Z (UTC%z)}"


def utc_text(instant: datetime) -> str:
    return instant.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# cron-descriptor's Chinese takes weekday and month names from Python's calendar, in English.
ZH_CALENDAR_NAMES = {
    **dict(
        zip(
            ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"),
            "一二三四五六日",
            strict=True,
        )
    ),
}
ZH_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_ZH_NAMES = re.compile(r"\b(" + "|".join((*ZH_CALENDAR_NAMES, *ZH_MONTHS)) + r")\b")


def _zh_calendar_name(found: re.Match) -> str:
    name = found.group(1)
    if name in ZH_CALENDAR_NAMES:
        return "周" + ZH_CALENDAR_NAMES[name]
    return f"{ZH_MONTHS.index(name) + 1} 月"


def cron_description(expr: str) -> str:
    """Human words for a cron expression, or "" if cron-descriptor cannot read it."""
    options = Options()
    options.use_24hour_time_format = True
    # cron-descriptor speaks Chinese too.
    zh = (get_language() or "").startswith("zh")
    options.locale_code = "zh_CN" if zh else "en_US"
    try:
        words = ExpressionDescriptor(expr, options).get_description()
    except (FormatException, ValueError, IndexError, KeyError):
        return ""
    return _ZH_NAMES.sub(_zh_calendar_name, words) if zh else words


def schedule_description(spec: schedule.ScheduleSpec, found: preview.Preview) -> str:
    """What the schedule is, in words: cron-descriptor's for cron, the catalogue's otherwise."""
    if spec.kind == "cron":
        return cron_description(spec.cron)
    return say(found.description)


def schedule_error(exc: schedule.ScheduleError) -> str:
    """A schedule refusal's words (the field is named where it is shown)."""
    return say(exc.reason)


def error_text(exc: Exception) -> str:
    """An exception for a message: a schedule refusal as "field: words", a guard's in words,
    anything else as it says."""
    if isinstance(exc, schedule.ScheduleError):
        return f"{exc.field}: {say(exc.reason)}"
    if isinstance(exc, evaluation.GuardError):
        return say(exc.reason)
    return str(exc)


def lint_check(item: lint.LintItem) -> str:
    return str(CATALOGUE[item.check])


def lint_message(item: lint.LintItem) -> str:
    # A sentence may begin with a listed problem ("no attempt cap; ..."): capitalised as a sentence.
    return capfirst(say(item.reason))


def lint_summary(summary: lint.LintSummary) -> str:
    """ "ok", or e.g. "2 fail, 1 warn"."""
    if not summary.fails and not summary.warns:
        return _("ok")
    parts = []
    if summary.fails:
        parts.append(_("%(n)s fail") % {"n": summary.fails})
    if summary.warns:
        parts.append(_("%(n)s warn") % {"n": summary.warns})
    return ", ".join(parts)
