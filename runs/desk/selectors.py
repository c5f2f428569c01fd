"""Read-only queries for the admin, the commands and /healthz."""

from datetime import datetime, timedelta
from typing import Any, TypedDict

from django.db.models import Count, Min, QuerySet
from django.utils.translation import gettext as _

from deadletters.models import DeadLetter
from deadletters.replays import replay_outcome
from harness_site.audit.models import AuditEntry
from runs.engine.durations import covered, worked
from runs.engine.outages import scheduler_stall_after, slot_grace
from runs.models import Decision, PoolSlot, PoolWaiter, SchedulerTick, TaskRun
from tasks.models import Pool, TriggerRule


def scheduler_health(*, now: datetime) -> dict[str, Any]:
    """The scheduler's health for /healthz and the stall alert.

    Not ok when no tick ran for the stall period, or as soon as a due slot has waited longer than
    the slot grace (from then on slots are lost to the catch-up policy); `reason` says which, `code`
    says it without names ("ok", "scheduler_stalled", "slot_overdue").
    """
    tick = SchedulerTick.objects.filter(name="scheduler").first()
    age = (now - tick.last_tick_at).total_seconds() if tick else None
    stall_after = scheduler_stall_after()
    oldest_due = (
        TaskRun.objects.filter(state=TaskRun.State.PENDING, run_after__lte=now)
        .order_by("run_after")
        .values_list("run_after", flat=True)
        .first()
    )
    slot = oldest_unclaimed_slot(now=now)
    slot_age = (now - slot["at"]).total_seconds() if slot else None
    grace = slot_grace().total_seconds()
    reason, code = "", "ok"
    if age is None or age > stall_after.total_seconds():
        reason = "no scheduler tick yet" if age is None else f"no scheduler tick for {age:.0f}s"
        code = "scheduler_stalled"
    elif slot is not None and slot_age is not None and slot_age > grace:
        reason = f"a slot of rule {slot['rule']} is {slot_age:.0f}s overdue (grace {grace:.0f}s)"
        code = "slot_overdue"
    return {
        "ok": not reason,
        "reason": reason,
        "code": code,  # the reason as a code that names nothing (/healthz tells anyone only this)
        "last_tick_at": tick.last_tick_at if tick else None,
        "last_tick_age_seconds": age,
        "stall_after_seconds": stall_after.total_seconds(),
        "slot_grace_seconds": grace,
        "oldest_pending_run_age_seconds": (now - oldest_due).total_seconds() if oldest_due else None,
        # A due slot no tick has turned into a run or a decision yet: grows when the scheduler stops.
        "oldest_unclaimed_slot_age_seconds": slot_age,
        "oldest_unclaimed_slot_rule": slot["rule"] if slot else None,
    }


class UnclaimedSlot(TypedDict):
    rule: str  # its name
    at: datetime  # its next_fire_at


def oldest_unclaimed_slot(*, now: datetime) -> UnclaimedSlot | None:
    """The oldest due slot of an enabled rule not yet claimed (rule_due_idx), or None."""
    row = (
        TriggerRule.objects.filter(enabled=True, next_fire_at__lte=now)
        .order_by("next_fire_at")
        .values_list("name", "next_fire_at")
        .first()
    )
    # next_fire_at__lte matched, so it is set: the check says so to the type checker.
    return {"rule": row[0], "at": row[1]} if row and row[1] is not None else None


def run_list_recent(*, limit: int = 50, rule_name: str | None = None) -> QuerySet[TaskRun]:
    qs = TaskRun.objects.order_by("-trigger_at", "-id")
    if rule_name:
        qs = qs.filter(rule_name=rule_name)
    return qs[:limit]


def run_timeline(run: TaskRun, *, now: datetime) -> dict[str, Any]:
    """Everything the run page shows, in reading order (a handful of queries). Execution time is the
    attempts' running time; the time spent waiting for a human (approvals, a ticket's replay) is apart."""
    attempts = list(run.attempt_set.order_by("number"))
    decisions = list(Decision.objects.filter(rule_id=run.rule_id, slot=run.slot)) if run.rule_id and run.slot else []
    if run.state == TaskRun.State.COALESCED and run.rule_id:  # its trigger's decision: replaced by which run
        decisions += list(Decision.objects.filter(rule_id=run.rule_id, slot=None, biz_key=run.biz_key))
    audit = list(AuditEntry.objects.filter(target_type="run", target_id=str(run.id)).order_by("at"))
    tickets = list(DeadLetter.objects.filter(run=run).order_by("created_at"))
    for index, ticket in enumerate(tickets):  # words as the ticket page's
        newer = tickets[index + 1] if index + 1 < len(tickets) else None
        ticket.replay = replay_outcome(  # type: ignore[attr-defined]
            ticket_state=ticket.state, run_state=run.state, newer_ticket_id=newer.pk if newer else None
        )
    human_waits = [(p.proposed_at, p.decided_at) for p in run.proposals.all()] + [
        (t.created_at, t.replayed_at or t.closed_at) for t in tickets
    ]
    started = [(a.started_at, a.finished_at) for a in attempts if a.started_at]
    waited = covered(human_waits, now=now)
    return {
        "steps": [
            (
                _("triggered"),
                run.trigger_at,
                _("%(source)s by %(who)s") % {"source": run.get_source_display(), "who": run.triggered_by or "-"},
            ),
            (
                _("started"),
                run.start_at,
                _("first attempt on %(worker)s") % {"worker": attempts[0].worker} if attempts else _("not yet"),
            ),
            (_("finished"), run.finish_at, run.get_state_display()),
        ],
        "queue_delay": duration_text(run.start_at - run.trigger_at) if run.start_at else "-",
        "execution_time": duration_text(worked(started, human_waits=human_waits, now=now)) if started else "-",
        "human_wait": duration_text(waited) if waited else "",
        "attempts": [
            {"a": a, "duration": duration_text(a.finished_at - a.started_at) if a.finished_at else _("running")}
            for a in attempts
        ],
        "decisions": decisions,
        "audit": audit,
        "tickets": tickets,
        "payload": run.payload,
        "is_trial": run.is_trial,
        "state": run.get_state_display(),
    }


def duration_text(delta: timedelta | None) -> str:
    """A duration for reading: 1.234s, 2.5 min, 3.0 h, 2.0 days."""
    if delta is None:
        return "-"
    s = delta.total_seconds()
    if abs(s) < 60:
        return f"{s:.3f}s"
    if abs(s) < 3600:
        return _("%(n).1f min") % {"n": s / 60}
    return _("%(n).1f h") % {"n": s / 3600} if abs(s) < 86400 else _("%(n).1f days") % {"n": s / 86400}


# --- Flow control: pressure per pool, saturation, why a run waits. ---

# Decision reasons written by backpressure (shed) and coalescing; counted whether or not they exist yet.
SHED_REASONS = ("shed", "coalesced")
PRESSURE_WINDOW = timedelta(hours=1)


def pool_pressure(*, now: datetime, top: int = 5) -> list[dict[str, Any]]:
    """Each pool's limit, in use, waiting (per key, top N), shed and coalesced in the last hour, and
    its oldest waiting run. Five queries, whatever the number of pools, keys or runs."""
    pools = list(Pool.objects.order_by("name"))
    in_use: dict[int, dict[str, int]] = {}
    for row in PoolSlot.objects.filter(expires_at__gt=now).values("pool_id", "key").annotate(n=Count("id")):
        in_use.setdefault(row["pool_id"], {})[row["key"]] = row["n"]
    waiting: dict[int, dict[str, int]] = {}
    for row in PoolWaiter.objects.values("pool_id", "key").annotate(n=Count("run_id")):
        waiting.setdefault(row["pool_id"], {})[row["key"]] = row["n"]
    waiters = PoolWaiter.objects.order_by("since").values("pool_id", "run_id", "since", "reason", "run__biz_key")
    # Oldest last, so that each pool keeps its oldest waiter.
    oldest = {waiter["pool_id"]: waiter for waiter in reversed(list(waiters[:500]))}
    shed: dict[tuple[str, str], int] = {}
    decisions = Decision.objects.filter(reason__in=SHED_REASONS, created_at__gte=now - PRESSURE_WINDOW)
    for counted in decisions.values("reason", "details__pool").annotate(n=Count("id")):
        pool_name = counted["details__pool"] if isinstance(counted["details__pool"], str) else ""
        shed[(counted["reason"], pool_name)] = shed.get((counted["reason"], pool_name), 0) + counted["n"]
    rows = []
    for pool in pools:
        used, waits = in_use.get(pool.id, {}), waiting.get(pool.id, {})
        busiest = max(used.values(), default=0)
        # Decisions that name no pool are intake-wide: counted on the global pool.
        mine = ("", pool.name) if pool.name == "global" else (pool.name,)
        rows.append(
            {
                "pool": pool,
                "name": pool.name,
                "limit": pool.max_concurrency,
                "rate": f"{pool.rate_count}/{pool.rate_period_seconds}s" if pool.rate_count else "",
                "keyed": bool(pool.key_template),
                "in_use": sum(used.values()),
                "busiest_key_in_use": busiest,
                "waiting": sum(waits.values()),
                "waiting_by_key": sorted(waits.items(), key=lambda kv: (-kv[1], kv[0]))[:top],
                "shed_1h": sum(shed.get(("shed", name), 0) for name in mine),
                "coalesced_1h": sum(shed.get(("coalesced", name), 0) for name in mine),
                "oldest_waiting": oldest.get(pool.id),
                "oldest_waiting_reason": PoolWaiter.Reason(oldest[pool.id]["reason"]).label
                if pool.id in oldest
                else "",
                "oldest_waiting_age_seconds": (now - oldest[pool.id]["since"]).total_seconds()
                if pool.id in oldest
                else None,
                "paused": bool(pool.paused_until and pool.paused_until > now),
                "paused_until": pool.paused_until,
                "saturated": pool.enabled and pool.max_concurrency is not None and busiest >= pool.max_concurrency,
            }
        )
    return rows


def flow_saturation(*, now: datetime) -> dict[str, Any]:
    """For /healthz and the dashboard: pools at their limit (on some key), paused pools, and how many
    runs wait for a pool. Saturation is pressure, not a fault: it never makes /healthz fail. Two queries."""
    saturated, paused = set(), set()
    rows = (
        PoolSlot.objects.filter(expires_at__gt=now, pool__enabled=True, pool__max_concurrency__isnull=False)
        .values("pool__name", "pool__max_concurrency", "key")
        .annotate(n=Count("id"))
    )
    for row in rows:
        if row["n"] >= row["pool__max_concurrency"]:
            saturated.add(row["pool__name"])
    waiters = PoolWaiter.objects.values("pool__name", "pool__paused_until").annotate(
        n=Count("run_id"), since=Min("since")
    )
    waiting, oldest = 0, None
    for waiter in waiters:
        waiting += waiter["n"]
        oldest = waiter["since"] if oldest is None or waiter["since"] < oldest else oldest
        if waiter["pool__paused_until"] and waiter["pool__paused_until"] > now:
            paused.add(waiter["pool__name"])
    return {
        "saturated_pools": sorted(saturated),
        "paused_pools": sorted(paused),
        "waiting_for_pool": waiting,
        "oldest_pool_wait_seconds": (now - oldest).total_seconds() if oldest else None,
    }


def run_wait_explain(run: TaskRun, *, now: datetime) -> dict[str, Any] | None:
    """Why a run that has not started is waiting for a pool, or None: which pool (and key), and
    in use / limit, the next rate token, or the provider's pause."""
    if run.state not in TaskRun.CLAIMABLE:
        return None
    waiter = PoolWaiter.objects.filter(run_id=run.id).select_related("pool").first()
    if waiter is None:
        return None
    pool = waiter.pool
    where = f"pool {pool.name}" + (f" [{waiter.key}]" if waiter.key else "")
    details: dict[str, object] = {
        "pool": pool.name,
        "key": waiter.key,
        "reason": waiter.reason,
        "since": waiter.since.isoformat(),
        "checked_at": waiter.checked_at.isoformat(),
    }
    if waiter.reason == PoolWaiter.Reason.CONCURRENCY:
        in_use = PoolSlot.objects.filter(pool=pool, key=waiter.key, expires_at__gt=now).count()
        ahead = PoolWaiter.objects.filter(pool=pool, key=waiter.key, reason=waiter.reason, since__lt=waiter.since)
        details.update(in_use=in_use, limit=pool.max_concurrency, waiting_ahead=ahead.count())
        limit = "∞" if pool.max_concurrency is None else pool.max_concurrency
        summary = f"waiting for {where}: {in_use} of {limit} in use, {details['waiting_ahead']} waiting ahead"
    elif waiter.reason == PoolWaiter.Reason.RATE:
        details.update(
            rate=f"{pool.rate_count}/{pool.rate_period_seconds}s",
            until=waiter.until.isoformat() if waiter.until else None,
        )
        summary = f"waiting for {where}: rate {details['rate']}, next start at {details['until']}"
    else:
        until = pool.paused_until or waiter.until
        details.update(until=until.isoformat() if until else None)
        summary = f"waiting for {where}: paused by the model provider (429 Retry-After) until {details['until']}"
    return {"summary": summary, "details": details}


def run_coalesced_into(run: TaskRun) -> TaskRun | None:
    """The run that carries a coalesced run's work now: the first run of its rule and object, after
    it, that was not itself replaced. None for a run that was not coalesced (or whose survivor is gone).

    Every coalescing run of an object created after a replaced one replaced it or its successor
    (run_one_pending_per_object), so that run ends the chain. Served by run_object_idx.
    """
    if run.state != TaskRun.State.COALESCED:
        return None
    return (
        TaskRun.objects.filter(rule_id=run.rule_id, object_key=run.object_key, coalesces=True, id__gt=run.id)
        .exclude(state=TaskRun.State.COALESCED)
        .order_by("id")
        .first()
    )
