"""The SQLite run store (the embedded default): every operation is the ORM's (runs.engine.store.orm).

SQLite serializes writers (IMMEDIATE transactions), so the statements a PostgreSQL claim combines
are separate here, in one transaction: run_take only reads, lease_claim never admits, and success
leaves the slots to the caller (the named differences of runs.engine.store.protocol.RunStore)."""

from typing import ClassVar

from runs.engine.store import orm


class SqliteStore:
    claims_in_take: ClassVar[bool] = False
    plain_admission: ClassVar[bool] = False
    releases_on_success: ClassVar[bool] = False

    # --- claims ---
    runs_insert = staticmethod(orm.runs_insert)
    decisions_insert = staticmethod(orm.decisions_insert)
    dedupe_hit = staticmethod(orm.dedupe_hit)
    dedupe_hits_add = staticmethod(orm.dedupe_hits_add)
    run_create = staticmethod(orm.run_create)
    coalesce_pending = staticmethod(orm.coalesce_pending)
    run_note = staticmethod(orm.run_note)
    runs_mark_dispatched = staticmethod(orm.runs_mark_dispatched)
    decision_record = staticmethod(orm.decision_record)
    decisions_delete = staticmethod(orm.decisions_delete)
    hold_record = staticmethod(orm.hold_record)
    hold_recheck = staticmethod(orm.hold_recheck)
    hold_release = staticmethod(orm.hold_release)
    rules_advance = staticmethod(orm.rules_advance)

    # --- the worker ---
    run_read = staticmethod(orm.run_read)
    run_take = staticmethod(orm.run_take)
    lease_claim = staticmethod(orm.lease_claim)
    run_leases_renew = staticmethod(orm.run_leases_renew)
    fence_holds = staticmethod(orm.fence_holds)
    run_succeed = staticmethod(orm.run_succeed)
    slots_release = staticmethod(orm.slots_release)

    # --- admission ---
    slots_drop_stale = staticmethod(orm.slots_drop_stale)
    admit = staticmethod(orm.admit)
    admission_refused = staticmethod(orm.admission_refused)
    hand_over = staticmethod(orm.hand_over)
    slots_expired_drop = staticmethod(orm.slots_expired_drop)
    waiters_forget = staticmethod(orm.waiters_forget)

    # --- outcomes ---
    retry_later = staticmethod(orm.retry_later)
    fail = staticmethod(orm.fail)
    attempt_end = staticmethod(orm.attempt_end)
    park_for_approval = staticmethod(orm.park_for_approval)
    park_for_budget = staticmethod(orm.park_for_budget)
    cancel_late = staticmethod(orm.cancel_late)
    push_back = staticmethod(orm.push_back)
    expiring = staticmethod(orm.expiring)
    slots_drop = staticmethod(orm.slots_drop)

    # --- operators ---
    replay = staticmethod(orm.replay)
    cancel = staticmethod(orm.cancel)
    force_release = staticmethod(orm.force_release)
    keyed_lease_force_release = staticmethod(orm.keyed_lease_force_release)
    approve = staticmethod(orm.approve)
    reject = staticmethod(orm.reject)
    gate_release = staticmethod(orm.gate_release)
    gate_reject = staticmethod(orm.gate_reject)

    # --- keyed leases ---
    keyed_lease_acquire = staticmethod(orm.keyed_lease_acquire)
    keyed_lease_renew = staticmethod(orm.keyed_lease_renew)
    keyed_lease_release = staticmethod(orm.keyed_lease_release)
    keyed_leases_renew = staticmethod(orm.keyed_leases_renew)

    # --- steps ---
    step_read = staticmethod(orm.step_read)
    steps_read = staticmethod(orm.steps_read)
    step_fence = staticmethod(orm.step_fence)
    step_insert = staticmethod(orm.step_insert)
    step_checkpoint = staticmethod(orm.step_checkpoint)

    # --- model calls ---
    agent_read = staticmethod(orm.agent_read)
    call_record = staticmethod(orm.call_record)
    call_delete = staticmethod(orm.call_delete)
    call_mark_lost = staticmethod(orm.call_mark_lost)
    call_mark_output = staticmethod(orm.call_mark_output)
    agent_limits_lock = staticmethod(orm.agent_limits_lock)
    agent_spend = staticmethod(orm.agent_spend)
    call_insert_counting = staticmethod(orm.call_insert_counting)
