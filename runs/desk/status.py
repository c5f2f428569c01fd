"""The status board: every rule as one row, worst first (healthchecks' list crossed with Airflow's grid).

What a row says: its health, its last outcome (run or slot decision), open dead letters, next fire,
slots missed and slots decided in the last 24 h, and, for the rows shown, a strip of its last 48 runs
and slot decisions. A fixed number of queries whatever the number of rules (tests/runs/test_status.py):

1. the rules, each with its last finished run and last slot decision (correlated probes of
   run_rule_recent_idx and decision_one_per_slot's index);
2. open tickets by rule (deadletter_open_idx);
3. decisions of the last 24 h by rule and reason (decision_created_idx);
4. for the rows shown, where each rule's last 48 runs and slot decisions begin;
5-6. those runs and those decisions (one index range per rule);
7-8. for the rows shown, the rules whose guards may skip a fire and their calendars' overrides
   (next_runs: the next *run*, as the preview says it, not a holiday's cron fire).

Pure ranking (`health_of`) takes plain values, so it is tested without a database.
"""

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.utils.translation import gettext_lazy as _

from deadletters.models import DeadLetter
from runs.engine.outages import slot_grace
from runs.models import Decision, TaskRun
from tasks.models import CalendarOverride, TriggerRule
from tasks.rules import preview, schedule, spread
from tasks.rules.guards import rule_guards

WINDOW = timedelta(hours=24)
HISTORY_CELLS = 48
PAGE_ROWS = 50  # rows with a strip per page (each strip is 48 links); the ranking and counts cover every rule

ACTIVE = frozenset(
    {TaskRun.State.PENDING, TaskRun.State.RUNNING, TaskRun.State.WAITING_RETRY, TaskRun.State.AWAITING_APPROVAL}
)
FINISHED = (TaskRun.State.SUCCEEDED, TaskRun.State.FAILED, TaskRun.State.CANCELLED, TaskRun.State.COALESCED)
# A slot that never ran and nothing ran in its place: missed beyond the catch-up window or cap.
MISSED_REASONS = frozenset({Decision.Reason.MISSED, Decision.Reason.CATCHUP_CAPPED})

# Health, worst first: the board's order and its filter.
FAILING = "failing"  # open dead letters, or the last run failed
OVERDUE = "overdue"  # an enabled rule's next fire is past its grace: the scheduler is not claiming it
MISSED = "missed"  # slots missed in the last 24 h
OK = "ok"
WAITING = "waiting"  # nothing finished yet
PAUSED = "paused"
HEALTH_ORDER = (FAILING, OVERDUE, MISSED, OK, WAITING, PAUSED)
HEALTH_LABELS = {
    FAILING: _("Failing"),
    OVERDUE: _("Overdue"),
    MISSED: _("Missed slots"),
    OK: _("OK"),
    WAITING: _("No outcome yet"),
    PAUSED: _("Paused"),
}


def reason_items(decided: dict[str, int]) -> list[tuple[str, str, int]]:
    """(reason, its label, count), most first: decisions by reason as a page lists them."""
    labels = dict(Decision.Reason.choices)
    return [(r, str(labels.get(r, r)), n) for r, n in sorted(decided.items(), key=lambda kv: (-kv[1], kv[0]))]


def cell_kind(state: str) -> str:
    """A run's colour in a history strip: run (succeeded), failed, active, or other."""
    if state == TaskRun.State.SUCCEEDED:
        return "run"
    if state == TaskRun.State.FAILED:
        return "failed"
    if state in ACTIVE:
        return "active"
    return "other"


def health_of(
    *,
    enabled: bool,
    next_fire_at: datetime | None,
    last_state: str | None,
    open_tickets: int,
    missed: int,
    now: datetime,
    grace: timedelta,
) -> str:
    """One rule's health. Pure: the facts in, one of HEALTH_ORDER out. A paused rule is paused even
    with open tickets (its row still shows them); a failure outranks everything else."""
    if not enabled:
        return PAUSED
    if open_tickets or last_state == TaskRun.State.FAILED:
        return FAILING
    if next_fire_at is not None and next_fire_at < now - grace:
        return OVERDUE
    if missed:
        return MISSED
    if last_state is None:
        return WAITING
    return OK


@dataclass
class RuleRow:
    id: int
    name: str
    enabled: bool
    kind: str
    kind_label: str
    timezone: str
    next_fire_at: datetime | None
    health: str
    last: dict | None  # {"kind": "run"|"decision", "state"|"reason", "label", "at", "run_id"|"decision_id"}
    open_tickets: int
    missed_24h: int
    decided_24h: dict[str, int]  # reason -> decisions recorded in the last 24 h
    strip: list[dict] = field(default_factory=list)  # filled for the rows shown
    objective: Any = None  # a freshness objective's status, when objectives supply one
    next_start: datetime | None = None  # a spread rule's next run starts then, not at its next fire
    next_run: datetime | None = None  # the next fire its guards let run (filled for the rows shown)

    @property
    def decided_total(self) -> int:
        return sum(self.decided_24h.values())

    @property
    def decided_items(self) -> list[tuple[str, str, int]]:
        return reason_items(self.decided_24h)

    @property
    def health_label(self) -> str:
        return str(HEALTH_LABELS[self.health])


@dataclass
class Board:
    now: datetime
    rows: list[RuleRow]  # the rows shown (filtered, searched, one page)
    total: int  # rules after filter and search
    counts: dict[str, int]  # health -> rules, before the filter
    missed_24h: int
    decided_24h: dict[str, int]
    page: int
    pages: int
    has_objectives: bool

    @property
    def decided_total(self) -> int:
        return sum(self.decided_24h.values())

    @property
    def decided_items(self) -> list[tuple[str, str, int]]:
        return reason_items(self.decided_24h)


def board_build(
    *,
    now: datetime,
    health: str = "",
    q: str = "",
    page: int = 1,
    per_page: int = PAGE_ROWS,
    objectives: Callable[[list[int]], dict[int, Any]] | None = None,
) -> Board:
    """Every rule ranked worst first, then by name; `health` and `q` (part of a name) narrow the rows,
    `page` picks PAGE_ROWS of them. `objectives`, when given, is one call returning a status per
    rule id for the rows shown (freshness objectives); without it the board has no objective column."""
    rows = rule_rows(now=now)
    counts = {h: 0 for h in HEALTH_ORDER}
    missed_all = 0
    decided_all: dict[str, int] = defaultdict(int)
    for row in rows:
        counts[row.health] += 1
        missed_all += row.missed_24h
        for reason, n in row.decided_24h.items():
            decided_all[reason] += n
    chosen = [r for r in rows if (not health or r.health == health) and (not q or q.casefold() in r.name.casefold())]
    chosen.sort(key=lambda r: (HEALTH_ORDER.index(r.health), -r.open_tickets, -r.missed_24h, r.name.casefold()))
    pages = max(1, -(-len(chosen) // per_page))
    page = min(max(page, 1), pages)
    shown = chosen[(page - 1) * per_page : page * per_page]
    strips = history_strips([r.id for r in shown])
    runs_next = next_runs([r.id for r in shown])
    for row in shown:
        row.strip = strips.get(row.id, [])
        row.next_run = runs_next.get(row.id, row.next_fire_at)
    if objectives is not None and shown:
        status = objectives([r.id for r in shown])
        for row in shown:
            row.objective = status.get(row.id)
    return Board(
        now=now,
        rows=shown,
        total=len(chosen),
        counts=counts,
        missed_24h=missed_all,
        decided_24h=dict(sorted(decided_all.items(), key=lambda kv: (-kv[1], kv[0]))),
        page=page,
        pages=pages,
        has_objectives=objectives is not None,
    )


def _runs_of_rule_newest_first(**filters) -> QuerySet:
    """The outer rule's runs, newest first, by run_rule_recent_idx alone. The range on rule_id
    (not an equality) and the order by (rule_id, -trigger_at) leave no other index that gives this
    order: with few distinct rules among the runs the planner expects thousands of runs per rule
    and walked run_recent_idx (every rule's runs, newest first) to meet this rule's soon, which for
    a rule without runs, or whose last finished one is old, read the whole index once per rule."""
    return TaskRun.objects.filter(rule_id__gte=OuterRef("pk"), rule_id__lte=OuterRef("pk"), **filters).order_by(
        "rule_id", "-trigger_at"
    )


def rule_rows(*, now: datetime) -> list[RuleRow]:
    """Every rule's row without its strip, in three queries (1-3 above), in no particular order."""
    since = now - WINDOW
    # 1. Rules with their last finished run and last slot decision (an index probe per rule each).
    # A trial is not the rule's outcome (nor its health): it shows in the strip, marked, only.
    last_run = _runs_of_rule_newest_first(state__in=FINISHED, is_trial=False)
    last_decision = Decision.objects.filter(rule=OuterRef("pk"), slot__isnull=False).order_by("-slot")
    rules = TriggerRule.objects.annotate(
        last_run_id=Subquery(last_run.values("id")[:1]),
        last_run_state=Subquery(last_run.values("state")[:1]),
        last_run_at=Subquery(last_run.annotate(at=Coalesce("slot", "trigger_at")).values("at")[:1]),
        last_decision_id=Subquery(last_decision.values("id")[:1]),
        last_decision_reason=Subquery(last_decision.values("reason")[:1]),
        last_decision_at=Subquery(last_decision.values("slot")[:1]),
    ).values(
        "id",
        "name",
        "enabled",
        "kind",
        "timezone",
        "next_fire_at",
        "last_run_id",
        "last_run_state",
        "last_run_at",
        "last_decision_id",
        "last_decision_reason",
        "last_decision_at",
    )
    # 2. Open tickets by rule; a ticket of a deleted run keeps its rule name only.
    tickets: dict[int, int] = dict(
        DeadLetter.objects.filter(state=DeadLetter.State.PENDING_MANUAL, run__rule__isnull=False)
        .values_list("run__rule_id")
        .annotate(n=Count("id"))
        .order_by()
        .values_list("run__rule_id", "n")
    )
    # 3. Decisions recorded in the last 24 h, by rule and reason.
    decided: dict[int, dict[str, int]] = defaultdict(dict)
    for rule_id, reason, n in (
        Decision.objects.filter(created_at__gte=since)
        .values_list("rule_id", "reason")
        .annotate(n=Count("id"))
        .order_by()
        .values_list("rule_id", "reason", "n")
    ):
        decided[rule_id][reason] = n
    kinds = dict(TriggerRule.Kind.choices)
    grace = slot_grace()
    starts = _next_starts()
    out = []
    for r in rules:
        last = _last_outcome(r)
        missed = missed_of(decided[r["id"]])
        open_tickets = tickets.get(r["id"], 0)
        out.append(
            RuleRow(
                id=r["id"],
                name=r["name"],
                enabled=r["enabled"],
                kind=r["kind"],
                kind_label=str(kinds.get(r["kind"], r["kind"])),
                timezone=r["timezone"],
                next_fire_at=r["next_fire_at"],
                health=health_of(
                    enabled=r["enabled"],
                    next_fire_at=r["next_fire_at"],
                    last_state=r["last_run_state"],
                    open_tickets=open_tickets,
                    missed=missed,
                    now=now,
                    grace=grace,
                ),
                last=last,
                open_tickets=open_tickets,
                missed_24h=missed,
                decided_24h=dict(decided[r["id"]]),
                next_start=starts.get(r["id"]),
            )
        )
    return out


SPREAD_KINDS = (TriggerRule.Kind.CRON, TriggerRule.Kind.INTERVAL)
SLOTTED_KINDS = (TriggerRule.Kind.CRON, TriggerRule.Kind.INTERVAL, TriggerRule.Kind.ONCE)


def next_runs(rule_ids: list[int]) -> dict[int, datetime | None]:
    """The next run of each enabled rule among `rule_ids` whose guards may skip a fire (a calendar,
    weekdays, excluded dates, hours): tasks.rules.preview.next_run, the preview's answer. Rules
    left out run at their next fire. Two queries whatever the number of rules: the scheduled rules
    with their calendars, then those calendars' overrides; each calendar is built once."""
    rules = list(
        TriggerRule.objects.filter(id__in=rule_ids, enabled=True, next_fire_at__isnull=False, kind__in=SLOTTED_KINDS)
        .select_related("business_calendar")
        .order_by()
    )
    calendar_ids = {r.business_calendar_id for r in rules if r.business_calendar_id is not None}
    overrides: dict[int, list] = defaultdict(list)
    if calendar_ids:
        for cal_id, *row in CalendarOverride.objects.filter(calendar_id__in=calendar_ids).values_list(
            "calendar_id", "date", "kind", "reason"
        ):
            overrides[cal_id].append(tuple(row))
    built: dict[int, Any] = {}
    out = {}
    for rule in rules:
        calendar, first = rule.business_calendar, rule.next_fire_at
        assert first is not None  # filtered above
        if calendar is not None:
            if calendar.id not in built:
                built[calendar.id] = calendar.business_days(overrides[calendar.id])
            # The model's own per-instance cache (TriggerRule.business_days), filled from the batch.
            rule.__dict__["_business_days"] = (calendar.id, built[calendar.id])
        guards = rule_guards(rule)
        if preview.guarded(guards):
            out[rule.id] = preview.next_run(rule.schedule_spec(), guards, first=first)
    return out


def _next_starts() -> dict[int, datetime]:
    """When each spread rule's next slot starts (tasks.rules.spread, as the tick will start it):
    a query for the rules with a spread of their own or from a pool (and one for their pools), then
    pure math. A rule with a random part has no one start to show."""
    spread_rules = (
        TriggerRule.objects.filter(next_fire_at__isnull=False, kind__in=SPREAD_KINDS, spread_random=False)
        .filter(Q(spread_seconds__gt=0) | Q(pools__spread_seconds__gt=0))
        .distinct()
        .prefetch_related("pools")
    )
    out = {}
    for rule in spread_rules:
        chosen, slot = rule.start_spread(), rule.next_fire_at
        if not chosen or slot is None:
            continue
        following = schedule.next_slot(rule.schedule_spec(), slot)
        out[rule.pk] = spread.start(rule.name, slot, timedelta(seconds=chosen.seconds), next_slot=following)
    return out


def _last_outcome(r: Mapping[str, Any]) -> dict | None:
    """The newer of the last finished run and the last slot decision, as the rule page says it."""
    run_at, decision_at = r["last_run_at"], r["last_decision_at"]
    if r["last_run_id"] is not None and (decision_at is None or run_at >= decision_at):
        state = TaskRun.State(r["last_run_state"])
        return {"kind": "run", "state": state.value, "label": state.label, "at": run_at, "run_id": r["last_run_id"]}
    if r["last_decision_id"] is not None:
        reason = Decision.Reason(r["last_decision_reason"])
        return {
            "kind": "decision",
            "reason": reason.value,
            "label": reason.label,
            "at": decision_at,
            "decision_id": r["last_decision_id"],
        }
    return None


def history_strips(rule_ids: list[int], *, cells: int = HISTORY_CELLS) -> dict[int, list[dict]]:
    """Each rule's last `cells` runs and slot decisions, oldest first, padded with empty cells in
    front: {"kind": run|failed|active|other|decision|empty, "at", "state"|"reason", "run_id"|"decision_id",
    "biz_key"}. Three queries for any number of rules: where each rule's last `cells` begin, then the
    runs and the decisions from there (one index range per rule)."""
    if not rule_ids:
        return {}
    # 4. The `cells`-th newest run (by trigger_at) and slot decision (by slot) of each rule.
    nth = cells - 1
    cuts = TriggerRule.objects.filter(id__in=rule_ids).annotate(
        run_from=Subquery(_runs_of_rule_newest_first().values("trigger_at")[nth : nth + 1]),
        decision_from=Subquery(
            Decision.objects.filter(rule=OuterRef("pk"), slot__isnull=False)
            .order_by("-slot")
            .values("slot")[nth : nth + 1]
        ),
    )
    run_range, decision_range = Q(), Q()
    for rule_id, run_from, decision_from in cuts.values_list("id", "run_from", "decision_from"):
        run_range |= Q(rule_id=rule_id, **({"trigger_at__gte": run_from} if run_from else {}))
        decision_range |= Q(
            rule_id=rule_id, slot__isnull=False, **({"slot__gte": decision_from} if decision_from else {})
        )
    items: dict[int, list[dict]] = defaultdict(list)
    # 5. The runs.
    for run in (
        TaskRun.objects.filter(run_range)
        .annotate(at=Coalesce("slot", "trigger_at"))
        .values("id", "rule_id", "state", "at", "trigger_at", "biz_key", "is_trial")
    ):
        items[run["rule_id"]].append(
            {
                "kind": cell_kind(run["state"]),
                "at": run["at"],
                "state": run["state"],
                "state_label": TaskRun.State(run["state"]).label,
                "run_id": run["id"],
                "biz_key": run["biz_key"],
                "trial": run["is_trial"],
            }
        )
    # 6. The slot decisions.
    for d in Decision.objects.filter(decision_range).values("id", "rule_id", "reason", "slot"):
        items[d["rule_id"]].append(
            {
                "kind": "decision",
                "at": d["slot"],
                "reason": d["reason"],
                "reason_label": Decision.Reason(d["reason"]).label,
                "decision_id": d["id"],
            }
        )
    strips = {}
    for rule_id in rule_ids:
        cells_ = sorted(items.get(rule_id, []), key=lambda c: c["at"], reverse=True)[:cells][::-1]
        strips[rule_id] = [{"kind": "empty", "at": None}] * (cells - len(cells_)) + cells_
    return strips


def decisions_by_reason(*, since: datetime) -> dict[str, int]:
    """Decisions recorded since `since`, by reason, most first (decision_created_idx): one query."""
    rows = Decision.objects.filter(created_at__gte=since).values("reason").annotate(n=Count("id")).order_by()
    return dict(sorted(((r["reason"], r["n"]) for r in rows), key=lambda kv: (-kv[1], kv[0])))


def missed_of(decided: dict[str, int]) -> int:
    """Missed slots among decisions counted by reason."""
    return sum(n for reason, n in decided.items() if reason in MISSED_REASONS)
