"""Diagnostic skills operators use to test the pipeline end to end."""

import time

from tasks.models import DiagnosticRecord
from tasks.skills.sdk import ErrorKind, SkillContext, SkillError, skill


@skill("harness.noop")
def noop(ctx: SkillContext) -> dict:
    """Do nothing and succeed."""
    return {"ok": True}


@skill("harness.sleep")
def sleep(ctx: SkillContext) -> dict:
    """Sleep for params.seconds (default 1), then succeed."""
    seconds = _number(ctx.params, "seconds", default=1.0)
    time.sleep(seconds)
    return {"slept": seconds}


@skill("harness.fail")
def fail(ctx: SkillContext) -> dict:
    """Fail the first params.fail_attempts attempts (default: all) with params.error_kind."""
    kind = ctx.params.get("error_kind", ErrorKind.TIMEOUT)
    fail_attempts = ctx.params.get("fail_attempts")
    if fail_attempts is None or ctx.attempt <= int(fail_attempts):
        if kind == ErrorKind.UNCLASSIFIED:
            raise RuntimeError(f"harness.fail: unclassified failure on attempt {ctx.attempt}")
        raise SkillError(kind, f"harness.fail: {kind} on attempt {ctx.attempt}")
    return {"succeeded_on_attempt": ctx.attempt}


@skill("harness.record")
def record(ctx: SkillContext) -> dict:
    """Write one DiagnosticRecord row per run, so duplicates are countable. params.seconds (default 0):
    work this long first, checking the lease every 0.1 s.

    The row is written as a write step: the row and its checkpoint commit in one fenced transaction,
    so a worker that dies after the write but before the run's outcome is recorded does not write
    it again on the retry (the step's checkpoint is found and returned instead).
    """
    deadline = time.monotonic() + _number(ctx.params, "seconds", default=0.0)
    while time.monotonic() < deadline:
        ctx.check_lease()
        time.sleep(min(0.1, max(deadline - time.monotonic(), 0)))

    return ctx.step("record", lambda: DiagnosticRecord.record(ctx), write=True)


def _number(params: dict, name: str, *, default: float) -> float:
    value = params.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise SkillError(ErrorKind.INVALID_PARAM, f"params.{name} must be a non-negative number, got {value!r}")
    return float(value)
