"""Execution records: runs, attempts, leases, decisions.

A foreign key whose column leads a composite index or unique constraint of its model has
db_index=False: the composite serves its lookups and cascades, and every index is written again on
each insert and non-HOT update, several times per run (tests/runs/test_indexes.py).
"""

from django.contrib.postgres.indexes import OpClass
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.db.models.functions import Upper
from django.utils.translation import gettext_lazy as _

from runs.key_index import KeyTrigramIndex
from tasks.rules import keys
from tasks.rules.backpressure import watermark_errors
from tasks.rules.policy import DEFAULT_LEASE_TTL_SECONDS, RetryPolicy, RunPolicy
from tasks.skills.sdk import DEFAULT_QUEUE


class TaskRun(models.Model):
    """One unit of work, unique by biz_key (invariant 1). Retries and replays are attempts of it."""

    class State(models.TextChoices):
        PENDING = "pending", _("Pending")
        RUNNING = "running", _("Running")
        WAITING_RETRY = "waiting_retry", _("Waiting to retry")
        SUCCEEDED = "succeeded", _("Succeeded")
        FAILED = "failed", _("Failed")
        CANCELLED = "cancelled", _("Cancelled")
        # Catch-up above the rule's approval threshold: not claimable until an operator approves.
        AWAITING_APPROVAL = "awaiting_approval", _("Awaiting approval")
        # Replaced while still pending by a newer trigger of its object (rule class "coalesce"); never
        # executed. The row keeps its biz_key, so a redelivery of it stays a dedupe hit (invariant 1).
        COALESCED = "coalesced", _("Coalesced into a newer trigger")

    class Source(models.TextChoices):
        SCHEDULER = "scheduler", _("Scheduler")
        CATCHUP = "catchup", _("Scheduler catch-up")
        MANUAL = "manual", _("Manual")
        API = "api", _("API")
        REPLAY = "replay", _("Replay")
        HEARTBEAT = "heartbeat", _("Heartbeat overdue")
        BACKFILL = "backfill", _("Backfill")
        EVENT = "event", _("Event (webhook, queue, file, Python)")

    CLAIMABLE = (State.PENDING, State.WAITING_RETRY)
    FINISHED = (State.SUCCEEDED, State.FAILED, State.CANCELLED, State.COALESCED)

    biz_key = models.CharField(_("biz key"), max_length=255)
    rule = models.ForeignKey(
        "tasks.TriggerRule",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="runs",
        db_index=False,
        verbose_name=_("rule"),
    )
    rule_name = models.CharField(
        _("rule name"),
        max_length=100,
        blank=True,
        help_text=_("Kept if the rule is deleted."),
    )
    rule_version = models.PositiveIntegerField(_("rule version"), null=True, blank=True)
    skill = models.CharField(_("skill"), max_length=100)
    source = models.CharField(_("source"), max_length=20, choices=Source.choices)
    triggered_by = models.CharField(
        _("triggered by"),
        max_length=150,
        blank=True,
        help_text=_("Who fired it: scheduler, an operator, …"),
    )
    executed_by = models.CharField(
        _("executed by"),
        max_length=150,
        blank=True,
        help_text=_("The worker identity that ran it."),
    )
    slot = models.DateTimeField(_("slot"), null=True, blank=True)
    trigger_at = models.DateTimeField(_("trigger at"))
    start_at = models.DateTimeField(_("start at"), null=True, blank=True)
    finish_at = models.DateTimeField(_("finish at"), null=True, blank=True)
    state = models.CharField(_("state"), max_length=20, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveIntegerField(_("attempts"), default=0)
    run_after = models.DateTimeField(_("run after"))
    first_failure_at = models.DateTimeField(_("first failure at"), null=True, blank=True)
    # The skill's input (params, snapshot) copied at trigger time, so a later rule edit does not change this run.
    payload = models.JSONField(_("payload"), default=dict, blank=True)
    # The engine policy, copied from the rule once at claim time (tasks.rules.policy.RunPolicy) and
    # read by both run-store backends: typed columns, never the payload.
    lease_ttl_seconds = models.FloatField(_("lease ttl seconds"), default=DEFAULT_LEASE_TTL_SECONDS)
    start_by = models.DateTimeField(
        _("start by"), null=True, blank=True, help_text=_("The latest start of a first attempt (start window).")
    )
    agent = models.CharField(_("agent"), max_length=100, blank=True)
    retry_max_attempts = models.PositiveIntegerField(_("max attempts"), default=RetryPolicy.max_attempts)
    retry_backoff_base_seconds = models.FloatField(_("backoff base seconds"), default=RetryPolicy.backoff_base_seconds)
    retry_max_delay_seconds = models.FloatField(_("max delay seconds"), default=RetryPolicy.max_delay_seconds)
    retry_window_seconds = models.FloatField(
        _("max retry window seconds"), default=RetryPolicy.max_retry_window_seconds
    )
    retry_jitter_min = models.FloatField(_("jitter min"), default=RetryPolicy.jitter_min)
    retry_jitter_max = models.FloatField(_("jitter max"), default=RetryPolicy.jitter_max)
    result = models.JSONField(_("result"), null=True, blank=True)
    last_error = models.TextField(_("last error"), blank=True)
    last_error_kind = models.CharField(_("last error kind"), max_length=40, blank=True)
    dedupe_hits = models.PositiveIntegerField(
        _("dedupe hits"),
        default=0,
        help_text=_("Triggers that found this run already there."),
    )
    # The executing identity (tasks.ServiceIdentity name) copied from the rule at trigger time; the
    # executor checks its allow-list again before running the skill.
    identity = models.CharField(_("identity"), max_length=100, blank=True)
    # Runs with the same object key never execute at once: the executor holds Lease "object:<key>".
    object_key = models.CharField(_("object key"), max_length=255, blank=True)
    # Claimed by a coalescing rule: while pending and never started, the only one of its (rule,
    # object_key); a newer trigger of the object replaces it (run_one_pending_per_object).
    coalesces = models.BooleanField(_("coalesces"), default=False)
    approved_by = models.CharField(_("approved by"), max_length=150, blank=True)
    approved_at = models.DateTimeField(_("approved at"), null=True, blank=True)
    # A trial run (admin "Trial run"): its biz_key lives in the rule's trial namespace (rule/<id>/trial/), so it never
    # dedupes against, or blocks, the real unit of work.
    is_trial = models.BooleanField(_("is trial"), default=False)
    # Last time a "execute run" message was sent; the sweeper re-sends only after a grace period.
    dispatched_at = models.DateTimeField(_("dispatched at"), null=True, blank=True)
    # "Execute run R" messages sent for this run, all attempts together (runs/engine/dispatch.py): more than
    # attempts + 1 means the sweeper re-sent a message it took for lost (runs/engine/sweeper.py).
    dispatches = models.PositiveIntegerField(_("messages sent"), default=0)
    # The run lease: who may execute it, until when, and the fencing token of the current holder.
    lease_owner = models.CharField(_("lease owner"), max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(_("lease expires at"), null=True, blank=True)
    fence = models.PositiveBigIntegerField(_("fence"), default=0)
    # The W3C trace id born at the trigger (harness_site/tracing.py): on every log line of the run, its
    # messages, its model calls and its dead-letter ticket. Blank for runs from before tracing.
    trace_id = models.CharField(_("trace id"), max_length=32, blank=True)
    # The queue its messages go to (its rule's, else its skill's), fixed at claim time so the sweeper
    # re-sends to the same workers.
    queue = models.CharField(_("queue"), max_length=32, default=DEFAULT_QUEUE)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("run")
        verbose_name_plural = _("runs")
        ordering = ["-trigger_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["biz_key"], name="run_unique_biz_key"),
            models.CheckConstraint(
                condition=~Q(state="running") | Q(lease_expires_at__isnull=False), name="run_running_has_lease"
            ),
            # A run waiting for a human holds no lease, so nothing can execute it meanwhile.
            models.CheckConstraint(
                condition=~Q(state="awaiting_approval") | Q(lease_expires_at__isnull=True),
                name="run_awaiting_approval_no_lease",
            ),
            # Coalescing (runs.engine.claims): at most one not-yet-started run per object of a coalescing
            # rule. A second insert conflicts, and the claim replaces the pending one instead.
            models.UniqueConstraint(
                fields=["rule", "object_key"],
                condition=Q(coalesces=True, state="pending", attempts=0),
                name="run_one_pending_per_object",
            ),
        ]
        indexes = [
            # run_list_due (sweeper): claimable runs by run_after.
            models.Index(fields=["run_after"], condition=Q(state__in=["pending", "waiting_retry"]), name="run_due_idx"),
            # run_list_expired_leases (sweeper): running runs by lease expiry.
            models.Index(fields=["lease_expires_at"], condition=Q(state="running"), name="run_lease_idx"),
            # admin and dashboard: recent runs of a rule.
            models.Index(fields=["rule", "-trigger_at"], name="run_rule_recent_idx"),
            models.Index(fields=["state", "-trigger_at"], name="run_state_recent_idx"),
            # object_next_waiting (executor): the next claimable run of an object after a lease release.
            models.Index(fields=["object_key", "run_after"], condition=~Q(object_key=""), name="run_object_idx"),
            # dashboard: runs triggered in the last 24 h, by time alone.
            models.Index(fields=["-trigger_at"], name="run_recent_idx"),
            # skill_duration_p99s (rule lint): a skill's most recent succeeded runs.
            models.Index(fields=["skill", "-finish_at"], condition=Q(state="succeeded"), name="run_skill_done_idx"),
            # pending_count (backpressure): pending runs, counted by index alone.
            models.Index(fields=["rule"], condition=Q(state="pending"), name="run_pending_idx"),
            # admin search by a trace id from a log line (runs/admin get_search_results).
            models.Index(fields=["trace_id"], condition=~Q(trace_id=""), name="run_trace_idx"),
            # runs.desk.key_search: part of a biz_key, any case (UPPER(biz_key) LIKE); pg_trgm on PostgreSQL.
            KeyTrigramIndex(OpClass(Upper("biz_key"), name="gin_trgm_ops"), name="run_biz_key_trgm_idx"),
        ]
        permissions = [
            ("retry_run", "Can retry a run now"),
            ("cancel_run", "Can cancel a run"),
            ("force_release_lease", "Can force-release a lease"),
            ("approve_catchup", "Can approve or reject catch-up runs"),
        ]

    def __str__(self) -> str:
        return keys.unescape(self.biz_key)  # titles and breadcrumbs: the key as the client wrote it

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            max_attempts=self.retry_max_attempts,
            backoff_base_seconds=self.retry_backoff_base_seconds,
            max_delay_seconds=self.retry_max_delay_seconds,
            max_retry_window_seconds=self.retry_window_seconds,
            jitter_min=self.retry_jitter_min,
            jitter_max=self.retry_jitter_max,
        )


def run_policy_fields(policy: RunPolicy) -> dict:
    """The run's policy columns for `policy`: the one place that copies a rule's policy into a run
    (runs.engine.claims, at claim time)."""
    retry = policy.retry
    return {
        "lease_ttl_seconds": policy.lease_ttl_seconds,
        "agent": policy.agent,
        "retry_max_attempts": retry.max_attempts,
        "retry_backoff_base_seconds": retry.backoff_base_seconds,
        "retry_max_delay_seconds": retry.max_delay_seconds,
        "retry_window_seconds": retry.max_retry_window_seconds,
        "retry_jitter_min": retry.jitter_min,
        "retry_jitter_max": retry.jitter_max,
    }


class RunLease(TaskRun):
    """The live run leases desk: running runs and who holds them (a proxy, no table)."""

    class Meta:
        proxy = True
        verbose_name = _("live run lease")
        verbose_name_plural = _("live run leases")


class Attempt(models.Model):
    class Outcome(models.TextChoices):
        RUNNING = "running", _("Running")
        SUCCEEDED = "succeeded", _("Succeeded")
        RETRY = "retry", _("Failed, will retry")
        FAILED = "failed", _("Failed for good")
        LEASE_EXPIRED = "lease_expired", _("Lease expired (worker lost)")
        FENCED = "fenced", _("Fenced out (lease taken)")
        PARKED = "parked", _("Parked: waiting for approval")

    run = models.ForeignKey(
        TaskRun, on_delete=models.CASCADE, related_name="attempt_set", db_index=False, verbose_name=_("run")
    )
    number = models.PositiveIntegerField(_("number"))
    fence = models.PositiveBigIntegerField(_("fence"))
    worker = models.CharField(_("worker"), max_length=200)
    started_at = models.DateTimeField(_("started at"))
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)
    outcome = models.CharField(_("outcome"), max_length=20, choices=Outcome.choices, default=Outcome.RUNNING)
    error_kind = models.CharField(_("error kind"), max_length=40, blank=True)
    error_digest = models.CharField(
        _("error digest"),
        max_length=16,
        blank=True,
        help_text=_("Stable fingerprint of the error."),
    )
    error = models.TextField(_("error"), blank=True)

    class Meta:
        verbose_name = _("attempt")
        verbose_name_plural = _("attempts")
        ordering = ["run", "number"]
        constraints = [models.UniqueConstraint(fields=["run", "number"], name="attempt_unique_number")]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.number}"


class Lease(models.Model):
    """A time-bounded, fenced claim on a key ("rule:<name>", "object:<key>").

    The run lease lives on the TaskRun row itself, so that the fencing check and the result write
    are one row in one transaction; this table carries the same three fields for every other key.
    """

    key = models.CharField(_("key"), max_length=255, unique=True)
    owner = models.CharField(_("owner"), max_length=200, blank=True)
    token = models.PositiveBigIntegerField(
        _("token"), default=0, help_text=_("Fencing token; grows on every acquisition.")
    )
    acquired_at = models.DateTimeField(_("acquired at"), null=True, blank=True)
    expires_at = models.DateTimeField(_("expires at"), null=True, blank=True)
    run = models.ForeignKey(
        TaskRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", verbose_name=_("run")
    )

    class Meta:
        verbose_name = _("lease")
        verbose_name_plural = _("leases")
        ordering = ["key"]

    def __str__(self) -> str:
        return self.key


class Decision(models.Model):
    """A recorded "did not run" outcome for one slot of a rule, or for one trigger (invariant 3).

    A scheduled slot's decision names its slot (one per (rule, slot)). A trigger without a slot (an
    event) or one replaced by coalescing names its biz_key instead (one per (rule, biz_key); a
    repeat of the same trigger counts in `hits`).
    """

    class Reason(models.TextChoices):
        MISSED = "missed", _("Missed: late, not caught up")
        SUPERSEDED = "superseded", _("Superseded by a later slot (catch-up latest)")
        INVALID_RULE = "invalid_rule", _("Rule could not be evaluated")
        OUTSIDE_WINDOW = "outside_window", _("Outside the start window or business hours")
        CALENDAR = "calendar", _("Not a business day (holiday, weekend or excluded date)")
        NOT_READY = "not_ready", _("Dependencies not ready (skip policy)")
        NOT_READY_EXPIRED = "not_ready_expired", _("Dependencies not ready by the deadline")
        OVERLAP = "overlap", _("A run of this rule was still active")
        CATCHUP_CAPPED = "catchup_capped", _("Missed, beyond the catch-up max count")
        PAUSED = "paused", _("Rule was paused")
        SHED = "shed", _("Shed by backpressure (recomputable, above the high watermark)")
        COALESCED = "coalesced", _("Coalesced into a newer trigger of the same object")

    rule = models.ForeignKey(
        "tasks.TriggerRule", on_delete=models.CASCADE, related_name="decisions", db_index=False, verbose_name=_("rule")
    )
    slot = models.DateTimeField(_("slot"), null=True, blank=True)
    # The trigger's business key: set for trigger decisions (no slot), kept in details for slots.
    biz_key = models.CharField(_("biz key"), max_length=255, blank=True)
    reason = models.CharField(_("reason"), max_length=30, choices=Reason.choices)
    details = models.JSONField(_("details"), default=dict, blank=True)
    # Coalesced: the run that replaced this trigger's run. If that one was replaced in turn, the run
    # carrying the work now is runs.desk.selectors.run_coalesced_into (explain and intake answers use it).
    survivor = models.ForeignKey(
        TaskRun,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="coalesced_decisions",
        verbose_name=_("survivor"),
    )
    hits = models.PositiveIntegerField(_("hits"), default=1, help_text=_("Triggers this decision answered."))
    created_at = models.DateTimeField(_("created at"))

    class Meta:
        verbose_name = _("decision")
        verbose_name_plural = _("decisions")
        ordering = ["-slot"]
        # Re-run chosen slots where they are found (tasks/triggers/rerun.py): on-call's after an
        # outage, without the range backfill that tasks.backfill_rule gives operators.
        permissions = [("rerun_slots", "Can re-run chosen slots")]
        constraints = [
            models.UniqueConstraint(fields=["rule", "slot"], name="decision_one_per_slot"),
            models.UniqueConstraint(
                fields=["rule", "biz_key"], condition=Q(slot__isnull=True), name="decision_one_per_trigger"
            ),
            models.CheckConstraint(
                condition=Q(slot__isnull=False) | ~Q(biz_key=""), name="decision_names_slot_or_trigger"
            ),
        ]
        indexes = [
            # decision_sweep: retention deletes by age.
            models.Index(fields=["created_at"], name="decision_created_idx"),
            # pressure page: shed and coalesced counts of the last hour.
            models.Index(fields=["reason", "created_at"], name="decision_reason_idx"),
        ]

    def __str__(self) -> str:
        at = f"{self.slot:%Y-%m-%dT%H:%M:%SZ}" if self.slot else self.biz_key
        return f"{self.rule_id}@{at}: {self.reason}"


class DecisionTally(models.Model):
    """Decisions deleted by retention, counted by rule name and reason, so /metrics can say how many
    decisions were ever recorded: the rows still kept plus these (runs.desk.metrics). Written only by the
    retention sweep, in the transaction that deletes the decisions it counts."""

    rule_name = models.CharField(_("rule name"), max_length=200)
    reason = models.CharField(_("reason"), max_length=30, choices=Decision.Reason.choices)
    count = models.PositiveBigIntegerField(_("count"), default=0)

    class Meta:
        verbose_name = _("decision tally")
        verbose_name_plural = _("decision tallies")
        constraints = [models.UniqueConstraint(fields=["rule_name", "reason"], name="decision_tally_unique")]

    def __str__(self) -> str:
        return f"{self.rule_name} {self.reason}: {self.count}"


class SlotHold(models.Model):
    """A due slot that is neither a run nor a decision yet: waiting for readiness (wait policy) or
    buffered behind an active run (overlap buffer). The tick re-checks it at recheck_at; resolving
    it deletes the row in the same transaction that creates the run or the decision (invariant 3)."""

    class Reason(models.TextChoices):
        NOT_READY = "not_ready", _("Waiting for readiness flags")
        OVERLAP = "overlap", _("Buffered behind an active run")

    rule = models.ForeignKey(
        "tasks.TriggerRule", on_delete=models.CASCADE, related_name="holds", db_index=False, verbose_name=_("rule")
    )
    slot = models.DateTimeField(_("slot"))
    reason = models.CharField(_("reason"), max_length=20, choices=Reason.choices)
    source = models.CharField(_("source"), max_length=20, default="scheduler")
    recheck_at = models.DateTimeField(_("recheck at"))
    deadline = models.DateTimeField(_("deadline"), null=True, blank=True)
    checks = models.PositiveIntegerField(_("checks"), default=0)
    details = models.JSONField(_("details"), default=dict, blank=True)
    created_at = models.DateTimeField(_("created at"))

    class Meta:
        verbose_name = _("slot hold")
        verbose_name_plural = _("slot holds")
        ordering = ["recheck_at"]
        constraints = [models.UniqueConstraint(fields=["rule", "slot"], name="hold_one_per_slot")]
        # hold_list_due (tick): holds to re-check, by recheck_at.
        indexes = [models.Index(fields=["recheck_at"], name="hold_due_idx")]

    def __str__(self) -> str:
        return f"{self.rule_id}@{self.slot:%Y-%m-%dT%H:%M:%SZ}: {self.reason}"


class Backpressure(models.Model):
    """The watermarks of pending runs for one pool, and whether intake is shedding there now
    (runs/engine/backpressure.py). The global pool's row is the harness-wide watermark: every pending run
    counts; another pool's counts the pending runs of the rules that name it.

    The state is kept here, not in a process, so every intake of every process agrees; it flips
    only when the pending count crosses a watermark (tasks.rules.backpressure.shedding_next).
    Operators edit the watermarks in the admin (audited); intake reads them within a second.
    """

    pool = models.OneToOneField(
        "tasks.Pool", on_delete=models.CASCADE, related_name="backpressure", verbose_name=_("pool")
    )
    high_watermark = models.PositiveIntegerField(
        _("high watermark"),
        null=True,
        blank=True,
        help_text=_("At this many pending runs intake starts shedding recomputable triggers; blank: never."),
    )
    low_watermark = models.PositiveIntegerField(
        _("low watermark"),
        null=True,
        blank=True,
        help_text=_("Shedding stops once pending runs fall to this many; blank: one below the high watermark."),
    )
    shedding = models.BooleanField(_("shedding"), default=False, editable=False)
    # When `shedding` last flipped, and the pending count that flipped it.
    changed_at = models.DateTimeField(_("changed at"), null=True, blank=True, editable=False)
    pending_at_change = models.PositiveIntegerField(_("pending at change"), null=True, blank=True, editable=False)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("backpressure watermark")
        verbose_name_plural = _("backpressure watermarks")
        ordering = ["pool__name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(low_watermark__isnull=True) | Q(low_watermark__lte=models.F("high_watermark")),
                name="backpressure_low_not_above_high",
            )
        ]

    def __str__(self) -> str:
        return str(self.pool)

    def clean(self) -> None:
        # The pure check finds the field at fault; the message is said here, so it is translated.
        found = watermark_errors(high=self.high_watermark, low=self.low_watermark)
        messages = {
            "high_watermark": _(
                "Set a high watermark of at least 1 (blank: never shed) for a low watermark to mean anything."
            )
            if self.high_watermark is None
            else _("The high watermark must be at least 1 (leave it blank to never shed)."),
            "low_watermark": _("The low watermark must not be above the high watermark."),
        }
        if found:
            raise ValidationError({field: messages[field] for field in found})


class SchedulerTick(models.Model):
    """Liveness of the scheduler: one row per beat identity, updated by every tick."""

    name = models.CharField(_("name"), max_length=200, unique=True)
    last_tick_at = models.DateTimeField(_("last tick at"))
    last_claimed = models.PositiveIntegerField(_("last claimed"), default=0)
    last_dedupe_hits = models.PositiveIntegerField(_("last dedupe hits"), default=0)
    # From here on every outage of this beat identity is a SchedulerOutage row (None: no history yet).
    history_since = models.DateTimeField(_("tick history since"), null=True, blank=True)

    class Meta:
        verbose_name = _("scheduler tick")
        verbose_name_plural = _("scheduler ticks")

    def __str__(self) -> str:
        return self.name


class SchedulerOutage(models.Model):
    """A span in which no scheduler tick ran for longer than the slot grace: from the last tick before
    to the first tick after (runs/engine/outages.py). Slots in it were first seen late, by the tick that
    ended it. One row per outage, written by that tick; none in steady state."""

    name = models.CharField(_("name"), max_length=200)
    started_at = models.DateTimeField(_("started at"))
    ended_at = models.DateTimeField(_("ended at"))

    class Meta:
        verbose_name = _("scheduler outage")
        verbose_name_plural = _("scheduler outages")
        ordering = ["-ended_at"]
        indexes = [
            # outages_between and outage_sweep: by the tick that ended the outage.
            models.Index(fields=["name", "ended_at"], name="outage_name_ended_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.started_at:%Y-%m-%dT%H:%M:%S}Z - {self.ended_at:%Y-%m-%dT%H:%M:%S}Z"


class RunRollup(models.Model):
    """What the dashboard counts for one 5-minute bucket of trigger_at: runs by state, dedupe hits,
    trials, and histograms of queue delay and end-to-end latency (runs/engine/rollup.py). Derived data,
    recomputed from the runs by the sweeper, so a million runs cost the dashboard 288 rows."""

    bucket = models.DateTimeField(_("bucket"), unique=True)  # rollup_read: the dashboard's range by bucket
    summary = models.JSONField(_("summary"), default=dict)
    refreshed_at = models.DateTimeField(_("refreshed at"))

    class Meta:
        verbose_name = _("run rollup")
        verbose_name_plural = _("run rollups")

    def __str__(self) -> str:
        return f"{self.bucket:%Y-%m-%dT%H:%M}Z"


# --- Records at the model boundary: checkpointed steps, external calls, proposed actions. ---
class RunStep(models.Model):
    """A completed (or deliberately skipped) step of a run's skill.

    Written under the run's fence, so only the lease holder checkpoints; unique by (run, name), so a
    retried or replayed attempt finds it and resumes after it instead of doing the step again.
    """

    run = models.ForeignKey(
        "runs.TaskRun", on_delete=models.CASCADE, related_name="steps", db_index=False, verbose_name=_("run")
    )
    name = models.CharField(_("name"), max_length=100)
    attempt = models.PositiveIntegerField(_("attempt"), help_text=_("The attempt that completed the step."))
    output = models.JSONField(_("output"), null=True, blank=True)
    digest = models.CharField(_("digest"), max_length=64, help_text=_("SHA-256 of the output's canonical JSON."))
    skipped = models.BooleanField(_("skipped"), default=False, help_text=_("A write step skipped by a dry run."))
    completed_at = models.DateTimeField(_("completed at"))

    class Meta:
        app_label = "runs"
        ordering = ["run", "completed_at", "id"]
        verbose_name = _("run step")
        verbose_name_plural = _("run steps")
        constraints = [models.UniqueConstraint(fields=["run", "name"], name="runstep_unique_name")]

    def __str__(self) -> str:
        return f"{self.run_id}:{self.name}"


class ExternalCall(models.Model):
    """One call to a model provider. Holds a hash of the input, never the key; the prompt text
    only when the agent opts in (store_prompts)."""

    run = models.ForeignKey(
        "runs.TaskRun", null=True, blank=True, on_delete=models.CASCADE, related_name="calls", verbose_name=_("run")
    )
    attempt = models.PositiveIntegerField(_("attempt"), null=True, blank=True)
    step = models.CharField(_("step"), max_length=100, blank=True)
    agent = models.ForeignKey(
        "tasks.Agent",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="calls",
        db_index=False,
        verbose_name=_("agent"),
    )
    agent_name = models.CharField(_("agent name"), max_length=100, help_text=_("Kept if the agent is deleted."))
    provider = models.CharField(_("provider"), max_length=20)
    endpoint = models.CharField(_("endpoint"), max_length=500)
    model = models.CharField(_("model"), max_length=200)
    input_sha256 = models.CharField(_("input sha256"), max_length=64)
    status = models.PositiveIntegerField(
        _("status"),
        null=True,
        blank=True,
        help_text=_("HTTP status; empty if none came back."),
    )
    error_kind = models.CharField(_("error kind"), max_length=40, blank=True)
    error_digest = models.CharField(_("error digest"), max_length=16, blank=True)
    latency_ms = models.PositiveIntegerField(_("latency ms"), default=0)
    prompt_tokens = models.PositiveIntegerField(_("prompt tokens"), null=True, blank=True)
    completion_tokens = models.PositiveIntegerField(_("completion tokens"), null=True, blank=True)
    output_valid = models.BooleanField(
        _("output valid"),
        null=True,
        blank=True,
        help_text=_("Whether the output passed validation."),
    )
    prompt_text = models.TextField(_("prompt text"), blank=True, help_text=_("Only when the agent stores prompts."))
    started_at = models.DateTimeField(_("started at"))

    class State(models.TextChoices):
        # Written before the request, so a call the provider may bill leaves a trace even if the
        # worker dies mid-call; the sweeper marks it lost when its run's lease expires.
        SENT = "sent", _("sent, no answer yet")
        DONE = "done", _("answered or failed")
        LOST = "lost", _("lost with its worker")

    # db_default: the previous release's workers insert after the call, without this column.
    state = models.CharField(_("state"), max_length=10, choices=State.choices, default=State.DONE, db_default="done")

    class Meta:
        app_label = "runs"
        ordering = ["-started_at", "-id"]
        verbose_name = _("external call")
        verbose_name_plural = _("external calls")
        indexes = [
            # agent_spend (budgets): one agent's calls in the current window.
            models.Index(fields=["agent", "started_at"], name="call_agent_window_idx"),
            # call_mark_lost (sweeper): a run's calls still in flight; few rows, so a small partial index.
            models.Index(fields=["run"], name="call_sent_idx", condition=models.Q(state="sent")),
        ]

    def __str__(self) -> str:
        return f"{self.agent_name} {self.status or self.error_kind} @ {self.started_at:%Y-%m-%dT%H:%M:%SZ}"

    @property
    def total_tokens(self) -> int:
        return (self.prompt_tokens or 0) + (self.completion_tokens or 0)


class ActionProposal(models.Model):
    """An action a skill proposed at medium or high risk: it runs only after a human approves."""

    class Risk(models.TextChoices):
        LOW = "low", _("Low")
        MEDIUM = "medium", _("Medium")
        HIGH = "high", _("High")

    class Status(models.TextChoices):
        PENDING = "pending", _("Awaiting approval")
        APPROVED = "approved", _("Approved")
        REJECTED = "rejected", _("Rejected")
        EXPIRED = "expired", _("Expired unanswered")

    run = models.ForeignKey(
        "runs.TaskRun", on_delete=models.CASCADE, related_name="proposals", db_index=False, verbose_name=_("run")
    )
    step = models.CharField(_("step"), max_length=100)
    action = models.CharField(_("action"), max_length=100)
    risk = models.CharField(_("risk"), max_length=10, choices=Risk.choices)
    args = models.JSONField(_("args"), default=dict, blank=True)
    status = models.CharField(_("status"), max_length=10, choices=Status.choices, default=Status.PENDING)
    proposed_at = models.DateTimeField(_("proposed at"))
    expires_at = models.DateTimeField(_("expires at"))
    decided_by = models.CharField(_("decided by"), max_length=150, blank=True)
    decided_at = models.DateTimeField(_("decided at"), null=True, blank=True)
    note = models.TextField(_("note"), blank=True)

    class Meta:
        app_label = "runs"
        ordering = ["-proposed_at", "-id"]
        verbose_name = _("action proposal")
        verbose_name_plural = _("action proposals")
        permissions = [("decide_actionproposal", "Can approve or reject proposed actions")]
        constraints = [
            # One proposal per step of a run: a re-executed attempt finds it instead of asking twice.
            models.UniqueConstraint(fields=["run", "step"], name="proposal_unique_step"),
        ]
        indexes = [
            # approval_expire_due (sweeper): pending proposals by expiry.
            models.Index(fields=["expires_at"], condition=Q(status="pending"), name="proposal_pending_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.action} ({self.risk}) for run {self.run_id}: {self.status}"


# --- Flow control: the slots runs hold in pools, the runs waiting for one, per-key state. ---


class PoolSlot(models.Model):
    """One slot a run holds in a pool, tied to the run's fence: it counts while it has not expired.

    Taken at admission (before the run lease, so `fence` is the fence the claim will write) or
    handed over by a release to the next waiting run; renewed with the run lease; deleted when the
    attempt ends, and reclaimed by the sweeper when it expires (a killed worker leaks nothing).
    """

    pool = models.ForeignKey(
        "tasks.Pool", on_delete=models.CASCADE, related_name="slots", db_index=False, verbose_name=_("pool")
    )
    key = models.CharField(_("key"), max_length=200, blank=True)
    run = models.ForeignKey(TaskRun, on_delete=models.CASCADE, related_name="pool_slots", verbose_name=_("run"))
    fence = models.PositiveBigIntegerField(_("fence"))
    worker = models.CharField(_("worker"), max_length=200, blank=True)
    acquired_at = models.DateTimeField(_("acquired at"))
    expires_at = models.DateTimeField(_("expires at"))

    class Meta:
        verbose_name = _("pool slot")
        verbose_name_plural = _("pool slots")
        ordering = ["pool", "key", "acquired_at"]
        constraints = [models.UniqueConstraint(fields=["pool", "run"], name="poolslot_one_per_run")]
        indexes = [
            # pool_in_use (admission): live slots of one pool and key.
            models.Index(fields=["pool", "key", "expires_at"], name="poolslot_in_use_idx"),
            # slot_reclaim (sweeper): expired slots.
            models.Index(fields=["expires_at"], name="poolslot_expiry_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.pool_id}:{self.key} run {self.run_id}"


class PoolWaiter(models.Model):
    """A run that was refused admission and waits: which pool, why, and since when (explain reads it)."""

    class Reason(models.TextChoices):
        CONCURRENCY = "concurrency", _("Pool at its concurrency limit")
        RATE = "rate", _("No rate token yet")
        PAUSED = "paused", _("Provider paused the pool (429 Retry-After)")

    run = models.OneToOneField(
        TaskRun, on_delete=models.CASCADE, primary_key=True, related_name="pool_wait", verbose_name=_("run")
    )
    pool = models.ForeignKey(
        "tasks.Pool", on_delete=models.CASCADE, related_name="waiters", db_index=False, verbose_name=_("pool")
    )
    key = models.CharField(_("key"), max_length=200, blank=True)
    # The key runs are served round robin by (the pool key, else the run's other pool key, object or rule).
    fair_key = models.CharField(_("fair key"), max_length=200, blank=True)
    reason = models.CharField(_("reason"), max_length=20, choices=Reason.choices)
    in_use = models.PositiveIntegerField(_("in use"), null=True, blank=True)
    limit = models.PositiveIntegerField(_("limit"), null=True, blank=True)
    until = models.DateTimeField(_("until"), null=True, blank=True)
    since = models.DateTimeField(_("since"))
    checked_at = models.DateTimeField(_("checked at"))

    class Meta:
        verbose_name = _("pool waiter")
        verbose_name_plural = _("pool waiters")
        ordering = ["since"]
        indexes = [
            # pool_wake (release, sweeper): waiters of one pool and key, oldest first.
            models.Index(fields=["pool", "key", "since"], name="poolwaiter_pool_idx"),
        ]

    def __str__(self) -> str:
        return f"run {self.run_id} waits for {self.pool_id}:{self.key} ({self.reason})"


class PoolKey(models.Model):
    """Per-key state of a pool: its token bucket (rate pools) and when it last started a run (fair order)."""

    pool = models.ForeignKey(
        "tasks.Pool", on_delete=models.CASCADE, related_name="key_states", db_index=False, verbose_name=_("pool")
    )
    key = models.CharField(_("key"), max_length=200, blank=True)
    tokens = models.FloatField(_("tokens"), null=True, blank=True)
    tokens_at = models.DateTimeField(_("tokens at"), null=True, blank=True)
    last_start_at = models.DateTimeField(_("last start at"), null=True, blank=True)

    class Meta:
        verbose_name = _("pool key")
        verbose_name_plural = _("pool keys")
        constraints = [models.UniqueConstraint(fields=["pool", "key"], name="poolkey_unique")]

    def __str__(self) -> str:
        return f"{self.pool_id}:{self.key}"


class WorkerHeartbeat(models.Model):
    """One Celery worker process, as it last reported itself (harness_site/worker_watch.py): alive,
    and whether it is still taking work. In the database, so /healthz sees it on every backend."""

    name = models.CharField(_("name"), max_length=200, unique=True)  # celery hostname + ":" + pid
    hostname = models.CharField(_("hostname"), max_length=150)
    pid = models.PositiveIntegerField(_("pid"))
    queues = models.CharField(_("queues"), max_length=200, blank=True)
    pool = models.CharField(_("pool"), max_length=40, blank=True)
    concurrency = models.PositiveIntegerField(_("concurrency"), default=0)
    started_at = models.DateTimeField(_("started at"))
    beat_at = models.DateTimeField(_("last heartbeat"))
    # The last time the worker was seen taking work, or having none to take (idle is healthy).
    progress_at = models.DateTimeField(_("last progress"))
    accepted = models.PositiveBigIntegerField(_("tasks started"), default=0)
    active = models.PositiveIntegerField(_("tasks running"), default=0)
    waiting = models.PositiveIntegerField(_("tasks received, not started"), default=0)
    # Runs whose messages this worker holds (received, running or waiting), at beat_at.
    held = models.JSONField(_("held runs"), default=list, blank=True)
    stopping = models.BooleanField(_("shutting down"), default=False)
    # Its watchdog ends it after work has waited this long (HARNESS_WORKER_STALL_SECONDS).
    stall_seconds = models.FloatField(_("stall period (s)"), default=60.0)
    # The process's database connection pool at beat_at (runs.engine.workers.POOL_STATS), where its runs
    # share it (a threads worker with HARNESS_DB_POOL_MAX); null elsewhere.
    db_pool = models.JSONField(_("database pool"), null=True, blank=True)
    # The latest migration of each app in the worker's code (harness_site.release): the release it
    # runs. Null from a release that did not report it.
    migrations = models.JSONField(_("built for migrations"), null=True, blank=True)

    class Meta:
        verbose_name = _("worker heartbeat")
        verbose_name_plural = _("worker heartbeats")
        ordering = ["hostname", "pid"]

    def __str__(self) -> str:
        return self.name


class SlotObjective(models.Model):
    """One slot's freshness objective and how it is going (tasks/rules/objectives.py): written by the
    objective pass (runs/engine/objectives.py) each time it looks, closed once the slot's outcome is final.

    One row per slot (unique), so each alert (at risk, breached, recovered) goes out once per slot,
    and the last 30 days of met/missed are a read of closed rows.
    """

    class Status(models.TextChoices):
        # Values are tasks.rules.objectives' statuses.
        MET = "met", _("Met")
        ON_TRACK = "on_track", _("On track")
        AT_RISK = "at_risk", _("At risk")
        BREACHED = "breached", _("Breached")
        EXCUSED = "excused", _("Excused (not meant to run)")

    rule = models.ForeignKey(
        "tasks.TriggerRule",
        on_delete=models.CASCADE,
        related_name="slot_objectives",
        db_index=False,  # slot_objective_one_per_slot leads with it
        verbose_name=_("rule"),
    )
    slot = models.DateTimeField(_("slot"))
    deadline = models.DateTimeField(_("objective deadline"))
    status = models.CharField(_("status"), max_length=10, choices=Status.choices)
    # The cause as a reason code and its parameters (tasks/sentences.py words it in the reader's language).
    cause = models.JSONField(_("cause"), default=dict, blank=True)
    expected_finish = models.DateTimeField(_("expected finish"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)
    lateness_seconds = models.FloatField(_("lateness seconds"), null=True, blank=True)
    # Final: the slot finished, or will not run; the pass no longer looks at it.
    closed = models.BooleanField(_("closed"), default=False)
    alerted_at_risk = models.BooleanField(_("at-risk alert sent"), default=False)
    alerted_breached = models.BooleanField(_("breach alert sent"), default=False)
    acknowledged_by = models.CharField(_("acknowledged by"), max_length=150, blank=True)
    acknowledged_at = models.DateTimeField(_("acknowledged at"), null=True, blank=True)
    checked_at = models.DateTimeField(_("checked at"))

    class Meta:
        verbose_name = _("slot objective")
        verbose_name_plural = _("slot objectives")
        ordering = ["-slot", "rule_id"]
        constraints = [models.UniqueConstraint(fields=["rule", "slot"], name="slot_objective_one_per_slot")]
        permissions = [("acknowledge_slotobjective", "Can acknowledge a slot objective (no more alerts for it)")]
        indexes = [
            # objective_status_for_rules and the metrics: each rule's open slots.
            models.Index(fields=["rule", "-slot"], condition=Q(closed=False), name="slot_objective_open_idx"),
            # objective_prune (retention).
            models.Index(fields=["slot"], name="slot_objective_slot_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.rule_id}@{self.slot:%Y-%m-%dT%H:%M:%SZ}: {self.status}"


class Incident(models.Model):
    """A span in which the harness itself was unwell: the scheduler stalled, a queue had no consuming
    worker, or the database or broker was unreachable (runs/engine/incidents.py). Opened by the periodic
    health pass from /healthz's own figures, or by the first scheduler tick after a gap no pass saw;
    closed when the figure is well. Database and broker outages are recorded, once over, by the
    workers that lived through them.
    What it cost (slots, runs, alerts, operator actions) is read from those tables over its span."""

    class Kind(models.TextChoices):
        SCHEDULER = "scheduler", _("Scheduler outage")
        QUEUE = "queue", _("Queue without a consuming worker")
        # Seen by the workers that lived through it, recorded when it was over (runs/engine/downtime.py).
        DATABASE = "database", _("Database outage")
        BROKER = "broker", _("Broker outage")

    kind = models.CharField(_("kind"), max_length=20, choices=Kind.choices)
    # What was down: "scheduler", the queue's name, "database" or "broker".
    subject = models.CharField(_("subject"), max_length=200)
    started_at = models.DateTimeField(_("started at"))
    detected_at = models.DateTimeField(_("detected at"))
    ended_at = models.DateTimeField(_("ended at"), null=True, blank=True)
    detail = models.TextField(_("detail"), blank=True)
    # Figures counted when it closed, for the closing alert and the metrics (the page reads live).
    summary = models.JSONField(_("summary"), default=dict, blank=True)

    class Meta:
        verbose_name = _("incident")
        verbose_name_plural = _("incidents")
        ordering = ["-started_at", "-id"]
        constraints = [
            # Several passes and ticks at once open one incident, not two.
            models.UniqueConstraint(
                fields=["kind", "subject"], condition=Q(ended_at__isnull=True), name="incident_one_open"
            ),
            # A scheduler outage is named by its last tick: a pass and a tick that both see it agree.
            models.UniqueConstraint(fields=["kind", "subject", "started_at"], name="incident_one_per_start"),
        ]
        indexes = [
            # the dashboard's recent incidents and the API list.
            models.Index(fields=["-started_at"], name="incident_recent_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.subject} {self.started_at:%Y-%m-%d %H:%M:%S}Z"
