"""The run store's interface: every write of a run's life, one named operation each, with typed
arguments and results. Both backends (runs.engine.store.postgres, runs.engine.store.sqlite) implement all of it;
neither inherits from the other, so a method added here and missing in a backend is a type error
(`store()` returns RunStore) and a failure of tests/runs/test_store_contract.py, never a silent
fallback. Where backends may answer differently, the difference is a named attribute below.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Protocol

from runs.models import Attempt, Decision, ExternalCall, RunStep, SlotHold, TaskRun
from tasks.agents.budgets import Spend
from tasks.models import Agent, TriggerRule


@dataclass(frozen=True)
class Taken:
    """A run as read by the worker: with the attempt started when the same statement claimed it
    (`plain`: whether every pool it draws from limits nothing; `checkpoints`: whether the run has
    any step checkpoint; each None when not asked)."""

    run: TaskRun | None
    attempt: Attempt | None = None
    plain: bool | None = None
    checkpoints: bool | None = None


class NotPlain(Exception):
    """A pool the run draws from limits something, or the run holds slots already: pool_admit's turn."""


# A (pool id, key) pair that a run waits for.
PoolPair = tuple[int, str]


@dataclass(frozen=True)
class Succeeded:
    """`written`: the fence held and the run is done. `waiting`: the freed (pool, key) pairs a run
    waits for, when the slots were given back in the same statement; None when they were not."""

    written: bool
    waiting: list[PoolPair] | None


@dataclass(frozen=True)
class ErrorRecord:
    """An error as a run and its attempt record it."""

    kind: str
    message: str
    digest: str = ""


@dataclass(frozen=True)
class Failure:
    """A failure written on a run, conditional: on `fence` still holding the run's lease (an
    attempt's outcome), or on the run still being in one of `from_states` (fence None: a slot failed
    at fire time, an approval expired). `take_lease`: bump the fence too, so the attempt that held
    it can never commit (the sweeper, after its lease expired)."""

    run_id: int
    error: ErrorRecord
    first_failure_at: datetime
    now: datetime
    fence: int | None = None
    from_states: tuple[str, ...] = ()
    take_lease: bool = False


@dataclass(frozen=True)
class AttemptEnd:
    """How attempt `number` of run `run_id` ended: with `error`, or with `error_kind` alone (its
    message and digest left as they were). `only_from`: only while its outcome is one of these
    (empty: whatever it is)."""

    run_id: int
    number: int
    outcome: str
    now: datetime
    error: ErrorRecord | None = None
    error_kind: str | None = None
    only_from: tuple[str, ...] = ()


@dataclass(frozen=True)
class Proposal:
    """An action a skill proposes and a human must approve (one per run and step)."""

    step: str
    action: str
    risk: str
    args: dict[str, Any]
    expires_at: datetime


@dataclass(frozen=True)
class BudgetPark:
    """A run waiting for its budget window (or its provider): due again at `until`, its attempt
    taken back so that waiting uses up no retry."""

    until: datetime
    message: str
    kind: str


@dataclass(frozen=True)
class Replay:
    """A waiting or failed run made due now (the one replay); `from_state` is the state read
    (compare-and-set). A failed run gets a fresh retry window."""

    run_id: int
    from_state: str
    now: datetime


@dataclass(frozen=True)
class ForceRelease:
    """An operator takes a running run's lease away: back to waiting_retry, due now, fence bumped,
    its running attempt fenced and its slots given back."""

    run_id: int
    fence: int
    now: datetime
    message: str
    error_kind: str


@dataclass(frozen=True)
class Waiting:
    """A run refused admission, put back unstarted (only while still claimable under the fence read)
    until `run_after`, with its one waiter row saying which pool and key it waits for and why."""

    run_id: int
    fence: int
    pool_id: int
    key: str
    fair_key: str
    reason: str
    in_use: int | None
    limit: int | None
    until: datetime | None
    run_after: datetime | None
    now: datetime


@dataclass(frozen=True)
class Admit:
    """A run admitted for the attempt under `fence`: a slot in each of `slots` (pool, key) pairs,
    the slots handed over to it already (held) made its worker's, all as long as its lease; its
    waiter row gone."""

    run_id: int
    fence: int
    worker: str
    slots: tuple[PoolPair, ...]
    held: bool
    now: datetime
    expires_at: datetime


@dataclass(frozen=True)
class Gate:
    """Runs held at the catch-up gate before their first attempt (awaiting approval, from one of
    `sources`, never attempted), decided by `approved_by` at `now`."""

    run_ids: tuple[int, ...]
    sources: tuple[str, ...]
    approved_by: str
    now: datetime


@dataclass(frozen=True)
class Held:
    """A keyed lease ("object:<key>") as taken: its owner and fencing token."""

    key: str
    owner: str
    token: int
    expires_at: datetime


# (run id, fence, new expiry) of a run lease; (key, owner, token, now, new expiry) of a keyed one.
RunLeaseRenewal = tuple[int, int, datetime]
KeyedLeaseRenewal = tuple[str, str, int, datetime, datetime]


class RunStore(Protocol):
    """Every write of a run's life. Fenced writes return False (or None) when the fence no longer
    held: nothing was written."""

    # Named differences between backends (the contract suite asserts each, per store class):
    # run_take claims a run with nothing in its way in its own statement.
    claims_in_take: ClassVar[bool]
    # lease_claim(plain=True) admits a run whose pools limit nothing in the claim's statement
    # (False: it always raises NotPlain and pool_admit decides).
    plain_admission: ClassVar[bool]
    # run_succeed(release_worker=...) gives the attempt's slots back in the same statement.
    releases_on_success: ClassVar[bool]

    # --- claims ---
    def runs_insert(self, runs: list[TaskRun]) -> list[TaskRun]: ...
    def decisions_insert(self, decisions: list[Decision]) -> list[Decision]: ...
    def dedupe_hit(self, biz_key: str) -> TaskRun | None: ...
    def dedupe_hits_add(self, taken: dict[str, int]) -> None: ...
    def run_create(self, run: TaskRun) -> None: ...
    def coalesce_pending(self, *, rule_id: int, object_key: str, now: datetime) -> TaskRun | None: ...
    def run_note(self, run_id: int, *, last_error: str) -> None: ...
    def decision_record(self, decision: Decision, *, replace: bool) -> Decision: ...
    def decisions_delete(self, ids: list[int]) -> list[tuple[str, str]]: ...
    def hold_record(self, hold: SlotHold) -> bool: ...
    def hold_recheck(
        self, hold_id: int, *, recheck_at: datetime | None, checks: int, details: dict[str, Any]
    ) -> None: ...
    def hold_release(self, hold_id: int) -> None: ...
    def runs_mark_dispatched(self, run_ids: list[int], *, now: datetime) -> list[tuple[int, str, str]]: ...
    def rules_advance(self, rules: list[TriggerRule]) -> None: ...

    # --- the worker ---
    def run_read(self, run_id: int) -> TaskRun | None: ...
    def run_take(self, run_id: int, *, worker: str, now: datetime) -> Taken: ...
    def lease_claim(self, run: TaskRun, *, worker: str, now: datetime, plain: bool) -> Attempt | None: ...
    def run_leases_renew(self, leases: list[RunLeaseRenewal]) -> set[int]: ...
    def fence_holds(self, *, run_id: int, fence: int) -> bool: ...
    def run_succeed(
        self, run: TaskRun, attempt: Attempt, result: Any, *, now: datetime, release_worker: str | None
    ) -> Succeeded: ...
    def slots_release(self, *, run_id: int, fence: int, worker: str | None) -> list[PoolPair]: ...

    # --- admission: pool slots and waiters ---
    def slots_drop_stale(self, *, run_id: int, fence: int) -> None: ...
    def admit(self, admit: Admit) -> None: ...
    def admission_refused(self, waiting: Waiting) -> list[PoolPair]: ...
    def hand_over(
        self, *, pool_id: int, key: str, runs: list[tuple[int, int]], now: datetime, expires_at: datetime
    ) -> None: ...
    def slots_expired_drop(self, *, now: datetime, limit: int) -> int: ...
    def waiters_forget(self) -> int: ...

    # --- outcomes ---
    def retry_later(self, failure: Failure, *, run_after: datetime) -> bool: ...
    def fail(self, failure: Failure) -> bool: ...
    def attempt_end(self, end: AttemptEnd) -> bool: ...
    def park_for_approval(self, run: TaskRun, attempt: Attempt, proposal: Proposal, *, now: datetime) -> bool: ...
    def park_for_budget(self, run: TaskRun, attempt: Attempt, park: BudgetPark) -> bool: ...
    def cancel_late(self, run_id: int, *, now: datetime, message: str, kind: str) -> bool: ...
    def push_back(self, run_id: int, *, run_after: datetime) -> bool: ...
    def expiring(self, run_id: int, *, fence: int, now: datetime) -> TaskRun | None: ...
    def slots_drop(self, *, run_id: int, fence: int) -> None: ...

    # --- operators ---
    def replay(self, replay: Replay) -> bool: ...
    def cancel(self, run_id: int, *, from_state: str, now: datetime) -> bool: ...
    def force_release(self, release: ForceRelease) -> bool: ...
    def keyed_lease_force_release(self, lease_id: int, *, owner: str, token: int, now: datetime) -> bool: ...

    def approve(self, run_id: int, *, now: datetime) -> bool: ...
    def reject(self, run_id: int, *, now: datetime, message: str, kind: str) -> bool: ...
    def gate_release(self, gate: Gate, *, run_after: datetime) -> bool: ...
    def gate_reject(self, gate: Gate, *, message: str) -> int: ...

    # --- keyed leases ---
    def keyed_lease_acquire(
        self, *, key: str, owner: str, expires_at: datetime, now: datetime, run_id: int | None
    ) -> Held | None: ...
    def keyed_lease_renew(self, held: Held, *, expires_at: datetime, now: datetime) -> Held | None: ...
    def keyed_lease_release(self, held: Held) -> bool: ...
    def keyed_leases_renew(self, leases: list[KeyedLeaseRenewal]) -> set[str]: ...

    # --- steps: checkpoints under the run's fence ---
    def step_read(self, run_id: int, name: str) -> RunStep | None: ...
    def steps_read(self, run_id: int) -> dict[str, RunStep]: ...
    def step_fence(self, *, run_id: int, fence: int, name: str) -> tuple[RunStep | None, bool]: ...
    def step_insert(self, step: RunStep) -> None: ...
    def step_checkpoint(self, step: RunStep, *, fence: int) -> bool: ...

    # --- model calls: records and the agents' budgets ---
    def agent_read(self, name: str) -> Agent | None: ...
    def call_record(self, call: ExternalCall) -> None: ...
    def call_delete(self, call_id: int) -> None: ...
    def call_mark_lost(self, run_id: int) -> int: ...
    def call_mark_output(self, call_id: int, *, valid: bool) -> None: ...
    def agent_limits_lock(self, agent_id: int) -> tuple[int | None, int | None]: ...
    def agent_spend(self, *, agent_id: int, start: datetime, end: datetime) -> Spend: ...
    def call_insert_counting(self, call: ExternalCall, *, start: datetime, end: datetime) -> Spend: ...
