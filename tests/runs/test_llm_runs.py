"""llm_json runs end to end at the service level: the executor in-process with an explicit clock,
the real database, and a real HTTP model provider on loopback.

Covers the model boundary: recorded calls, retries by error kind (Retry-After as a
floor), dead letters with the raw output, checkpointed steps that resume after a lost worker,
dry runs, hourly budgets and actions that wait for approval.
"""

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from deadletters.alert_queue import alert_deliver_due
from deadletters.models import AlertChannel, DeadLetter
from runs.engine.approvals import approval_expire_due, proposal_approve, proposal_reject
from runs.engine.claims import Work, run_claim
from runs.engine.executor import run_execute
from runs.engine.sweeper import sweep
from runs.models import ActionProposal, Attempt, ExternalCall, RunStep, TaskRun
from tasks.models import Agent, DiagnosticRecord, Pool
from tasks.skills.actions import action
from tasks.skills.sdk import ErrorKind, SkillContext
from tests.support.fake_model import FakeModelServer, Reply, completion, json_completion
from tests.support.rules import make_rule
from tests.support.runs import run_policy

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
KEY_ENV = "HARNESS_SECRET_H9_TEST_MODEL"
KEY = "sk-live-9f8e7d6c5b4a39281706"
POLICY = {
    "max_attempts": 3,
    "backoff_base_seconds": 10.0,
    "max_delay_seconds": 300,
    "max_retry_window_seconds": 3600,
    "jitter_min": 0.5,
    "jitter_max": 1.5,
    "lease_ttl_seconds": 60,
}
SCHEMA = {
    "type": "object",
    "required": ["summary", "severity"],
    "properties": {"summary": {"type": "string"}, "severity": {"enum": ["info", "warning", "critical"]}},
}
GOOD = {"summary": "all quiet", "severity": "info"}


@pytest.fixture
def server():
    s = FakeModelServer().start()
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def env(monkeypatch, settings):
    monkeypatch.setenv(KEY_ENV, KEY)
    settings.ADMINS = [("On call", "oncall@example.com")]
    # The default alert channel the data migration installs (transactional tests flush it).
    AlertChannel.objects.update_or_create(  # installed disabled while ADMINS is unset
        name="On-call email (ADMINS)", defaults={"kind": "email", "min_severity": "urgent", "enabled": True}
    )


def make_agent(server: FakeModelServer | None, **over) -> Agent:
    data = dict(
        name="writer",
        provider="openai",
        base_url=server.base_url if server else "",
        model="gpt-test",
        api_key_env=KEY_ENV,
        connect_timeout_seconds=2.0,
        read_timeout_seconds=5.0,
    )
    data.update(over)
    return Agent.objects.create(**data)


def make_run(agent: Agent, *, params=None, policy=None, biz_key="llm:1", schema=SCHEMA, dry_run=False, now=T0):
    payload = {
        "params": {
            "prompt": "Summarise {topic} as JSON.",
            "topic": "the night",
            "action": "harness.record",
            **(params or {}),
        },
        "output_schema": schema,
    }
    if dry_run:
        payload["dry_run"] = True
    return run_claim(
        Work(
            biz_key=biz_key,
            skill="llm_json",
            source=TaskRun.Source.API,
            triggered_by="tests",
            payload=payload,
            policy=run_policy({**POLICY, **(policy or {})}, agent=agent.name),
        ),
        now=now,
    ).run


def execute(run: TaskRun, at: datetime, worker: str = "w1"):
    return run_execute(run_id=run.id, worker=worker, clock=lambda: at, rand=lambda: 0.5)


def fresh(run: TaskRun) -> TaskRun:
    return TaskRun.objects.get(id=run.id)


def steps(run: TaskRun) -> list[tuple[str, int, bool]]:
    return list(RunStep.objects.filter(run=run).order_by("id").values_list("name", "attempt", "skipped"))


def test_it_records_a_successful_call_with_usage_and_checkpoints_each_step(server):
    server.respond(json_completion(GOOD, prompt_tokens=30, completion_tokens=9))
    run = make_run(make_agent(server))

    outcome = execute(run, T0)

    run = fresh(run)
    assert outcome.status == "succeeded" and run.result["output"] == GOOD
    assert steps(run) == [("fetch_input", 1, False), ("call_model", 1, False), ("write_result", 1, False)]
    [call] = ExternalCall.objects.filter(run=run)
    assert (call.status, call.prompt_tokens, call.completion_tokens, call.output_valid) == (200, 30, 9, True)
    assert call.endpoint == server.base_url + "/chat/completions" and call.attempt == 1 and len(call.input_sha256) == 64
    assert call.prompt_text == ""  # the agent did not opt in
    assert server.requests[0]["body"]["messages"][-1]["content"] == "Summarise the night as JSON."
    assert DiagnosticRecord.objects.filter(run_id=run.id).count() == 1


def test_it_stores_the_prompt_only_when_the_agent_opts_in(server):
    server.respond(json_completion(GOOD))
    run = make_run(make_agent(server, store_prompts=True))

    execute(run, T0)

    assert "Summarise the night as JSON." in ExternalCall.objects.get(run=run).prompt_text


def test_it_waits_at_least_retry_after_on_429_then_succeeds(server):
    server.respond(Reply(429, '{"error": "rate"}', {"Retry-After": "45"}), json_completion(GOOD))
    run = make_run(make_agent(server))

    first = execute(run, T0)

    run = fresh(run)
    # Backoff alone would be 10 s (base 10, jitter factor 1.0); the server asked for 45.
    assert first.status == "retry" and run.state == TaskRun.State.WAITING_RETRY
    assert run.last_error_kind == ErrorKind.RATE_LIMITED and run.run_after == T0 + timedelta(seconds=45)
    assert execute(run, T0 + timedelta(seconds=44)).status == "not_claimable"

    second = execute(run, T0 + timedelta(seconds=45))

    assert second.status == "succeeded"
    assert list(ExternalCall.objects.filter(run=run).order_by("id").values_list("status", "error_kind")) == [
        (429, ErrorKind.RATE_LIMITED),
        (200, ""),
    ]


def test_it_dead_letters_after_three_server_errors(server):
    server.respond(Reply(500, '{"error": "boom"}'))
    run = make_run(make_agent(server))

    at = T0
    outcomes = []
    for _ in range(3):
        outcomes.append(execute(run, at).status)
        at = fresh(run).run_after or at

    run = fresh(run)
    assert outcomes == ["retry", "retry", "failed"] and run.state == TaskRun.State.FAILED
    assert ExternalCall.objects.filter(run=run, status=500).count() == 3 == len(server.requests)
    ticket = DeadLetter.objects.get(run=run)
    assert ticket.error_kind == ErrorKind.DEPENDENCY_UNREACHABLE and ticket.attempts == 3
    assert not RunStep.objects.filter(run=run, name="call_model").exists()


def test_it_times_out_a_hung_provider_and_retries(server):
    server.respond(Reply(hang=30, body="{}"))
    run = make_run(make_agent(server, read_timeout_seconds=0.3))

    outcome = execute(run, T0)

    run = fresh(run)
    assert outcome.status == "retry" and run.last_error_kind == ErrorKind.TIMEOUT
    call = ExternalCall.objects.get(run=run)
    assert call.status is None and call.error_kind == ErrorKind.TIMEOUT and call.error_digest


def _exhaust(run: TaskRun) -> TaskRun:
    at = T0
    for _ in range(POLICY["max_attempts"]):
        execute(run, at)
        at = fresh(run).run_after or at
    return fresh(run)


def test_it_retries_malformed_json_then_dead_letters_with_the_raw_output(server):
    server.respond(completion("Sure! Here is your JSON: {summary: quiet"))
    run = _exhaust(make_run(make_agent(server)))

    assert run.state == TaskRun.State.FAILED and run.last_error_kind == ErrorKind.MODEL_INVALID_OUTPUT
    assert ExternalCall.objects.filter(run=run, output_valid=False).count() == 3
    ticket = DeadLetter.objects.get(run=run)
    assert ticket.error_kind == ErrorKind.MODEL_INVALID_OUTPUT
    assert ticket.raw_output == "Sure! Here is your JSON: {summary: quiet"
    assert DiagnosticRecord.objects.filter(run_id=run.id).count() == 0


def test_it_rejects_output_failing_the_schema_and_attaches_it_to_the_ticket(server):
    bad = {"summary": "all quiet", "severity": "meh"}
    server.respond(json_completion(bad))
    run = _exhaust(make_run(make_agent(server)))

    ticket = DeadLetter.objects.get(run=run)
    assert ticket.error_kind == ErrorKind.MODEL_INVALID_OUTPUT and json.loads(ticket.raw_output) == bad
    assert "severity" in ticket.last_error
    assert (
        list(Attempt.objects.filter(run=run).values_list("error_kind", flat=True))
        == [ErrorKind.MODEL_INVALID_OUTPUT] * 3
    )
    assert not ExternalCall.objects.filter(run=run, output_valid=True).exists()


class WorkerKilled(BaseException):
    """Stands in for kill -9: escapes every handler, so nothing after it is recorded."""


_kill_once: set[str] = set()


@action("tests.record_unless_killed", risk="low")
def record_unless_killed(ctx: SkillContext, args: dict) -> dict:
    """Dies the first time for a marked biz_key, after call_model was checkpointed."""
    if ctx.biz_key in _kill_once:
        _kill_once.discard(ctx.biz_key)
        raise WorkerKilled()
    return {
        "record_id": DiagnosticRecord.objects.create(
            run_id=ctx.run_id, biz_key=ctx.biz_key, fence=ctx.fence, attempt=ctx.attempt, created_at=ctx.now
        ).id
    }


def test_it_resumes_at_write_result_after_a_lost_worker_with_one_model_call(server):
    server.respond(json_completion(GOOD))
    run = make_run(make_agent(server), params={"action": "tests.record_unless_killed"}, biz_key="llm:killed")
    _kill_once.add(run.biz_key)

    with pytest.raises(WorkerKilled):
        execute(run, T0, worker="doomed")
    assert fresh(run).state == TaskRun.State.RUNNING  # the dead worker still holds the lease
    assert [s[0] for s in steps(run)] == ["fetch_input", "call_model"]

    swept = sweep(now=T0 + timedelta(seconds=61), rand=lambda: 0.5)
    run = fresh(run)
    assert swept.expired == 1 and run.state == TaskRun.State.WAITING_RETRY
    outcome = execute(run, run.run_after, worker="survivor")

    run = fresh(run)
    assert outcome.status == "succeeded" and run.result["output"] == GOOD
    assert steps(run) == [("fetch_input", 1, False), ("call_model", 1, False), ("write_result", 2, False)]
    assert ExternalCall.objects.filter(run=run).count() == 1 and len(server.requests) == 1
    assert DiagnosticRecord.objects.filter(run_id=run.id).count() == 1


def test_it_skips_write_steps_in_a_dry_run_but_calls_the_model(server):
    server.respond(json_completion(GOOD))
    run = make_run(make_agent(server), dry_run=True)

    outcome = execute(run, T0)

    run = fresh(run)
    assert outcome.status == "succeeded" and run.result["dry_run"] is True and run.result["write"] is None
    assert steps(run) == [("fetch_input", 1, False), ("call_model", 1, False), ("write_result", 1, True)]
    assert len(server.requests) == 1 and DiagnosticRecord.objects.count() == 0


def test_it_runs_the_echo_agent_without_network_or_key(monkeypatch):
    monkeypatch.delenv(KEY_ENV)
    echo = make_agent(None, name="demo-echo", provider="echo", model="echo", api_key_env="")
    run = make_run(echo, params={"prompt": "{input_json}", "summary": "ok", "severity": "warning"})

    outcome = execute(run, T0)

    assert outcome.status == "succeeded"
    assert fresh(run).result["output"] == {"summary": "ok", "severity": "warning", "topic": "the night"}
    assert ExternalCall.objects.get(run=run).endpoint == "echo:"


def test_it_parks_runs_when_the_call_budget_is_spent_until_the_window_resets(server):
    server.respond(json_completion(GOOD, prompt_tokens=5, completion_tokens=5))
    agent = make_agent(server, max_calls_per_hour=1)
    first, second = make_run(agent, biz_key="llm:a"), make_run(agent, biz_key="llm:b")
    assert execute(first, T0 + timedelta(minutes=10)).status == "succeeded"

    outcome = execute(second, T0 + timedelta(minutes=20))

    second = fresh(second)
    assert outcome.status == "waiting_budget" and second.state == TaskRun.State.WAITING_RETRY
    assert second.last_error_kind == "budget" and second.run_after == T0 + timedelta(hours=1)
    assert second.attempts == 0 and not Attempt.objects.filter(run=second).exists()  # waiting uses no retry
    assert second.lease_owner == "" and second.lease_expires_at is None
    assert len(server.requests) == 1

    assert execute(second, T0 + timedelta(hours=1)).status == "succeeded"
    assert fresh(second).attempts == 1


def test_it_parks_runs_when_the_token_budget_is_spent(server):
    server.respond(json_completion(GOOD, prompt_tokens=60, completion_tokens=50))
    agent = make_agent(server, max_tokens_per_hour=100)
    execute(make_run(agent, biz_key="llm:a"), T0)

    outcome = execute(make_run(agent, biz_key="llm:b"), T0 + timedelta(minutes=59))

    assert outcome.status == "waiting_budget" and "token budget" in outcome.detail


# --- risky actions ---------------------------------------------------------------------------


def _proposed(server, at: datetime = T0) -> tuple[TaskRun, ActionProposal]:
    server.respond(json_completion(GOOD))
    run = make_run(make_agent(server), params={"action": "harness.record_guarded"}, now=at)
    outcome = execute(run, at)
    assert outcome.status == "awaiting_approval"
    return fresh(run), ActionProposal.objects.get(run=run)


def test_it_holds_a_high_risk_action_for_approval_without_a_lease(server):
    run, proposal = _proposed(server)

    assert run.state == TaskRun.State.AWAITING_APPROVAL and run.lease_expires_at is None and run.lease_owner == ""
    assert (proposal.action, proposal.risk, proposal.status) == ("harness.record_guarded", "high", "pending")
    assert proposal.args == {"output": GOOD} and proposal.expires_at == T0 + timedelta(hours=24)
    assert execute(run, T0 + timedelta(minutes=5)).status == "not_claimable"
    assert sweep(now=T0 + timedelta(hours=1)).dispatched == 0
    assert DiagnosticRecord.objects.count() == 0


def test_it_runs_an_approved_action_once_even_when_approved_twice(server, admin_user):
    run, proposal = _proposed(server)
    later = T0 + timedelta(minutes=5)

    assert proposal_approve(proposal_id=proposal.id, actor=admin_user, now=later) is True
    assert proposal_approve(proposal_id=proposal.id, actor=admin_user, now=later) is False
    assert fresh(run).state == TaskRun.State.PENDING
    outcome = execute(run, later)
    assert proposal_approve(proposal_id=proposal.id, actor=admin_user, now=later) is False

    run = fresh(run)
    assert outcome.status == "succeeded" and run.state == TaskRun.State.SUCCEEDED
    assert DiagnosticRecord.objects.filter(run_id=run.id).count() == 1
    assert len(server.requests) == 1  # the model was not asked again after approval
    proposal.refresh_from_db()
    assert (proposal.status, proposal.decided_by) == ("approved", admin_user.username)
    from harness_site.audit.models import AuditEntry

    assert AuditEntry.objects.filter(action="proposal.approve", actor=admin_user.username).count() == 1


def test_it_closes_the_run_when_the_action_is_rejected(server, admin_user):
    run, proposal = _proposed(server)

    assert proposal_reject(proposal_id=proposal.id, actor=admin_user, now=T0, note="not today") is True
    assert proposal_approve(proposal_id=proposal.id, actor=admin_user, now=T0) is False

    run = fresh(run)
    assert run.state == TaskRun.State.CANCELLED and "not today" in run.last_error
    assert execute(run, T0 + timedelta(minutes=1)).status == "not_claimable"
    assert DiagnosticRecord.objects.count() == 0


def test_it_expires_an_unanswered_approval_with_an_alert(server, mailoutbox):
    run, proposal = _proposed(server)

    assert approval_expire_due(now=T0 + timedelta(hours=23)) == 0
    assert approval_expire_due(now=T0 + timedelta(hours=24)) == 1
    assert approval_expire_due(now=T0 + timedelta(hours=25)) == 0

    run = fresh(run)
    assert run.state == TaskRun.State.FAILED and run.last_error_kind == "approval_expired"
    assert DeadLetter.objects.get(run=run).error_kind == "approval_expired"
    alert_deliver_due(now=T0 + timedelta(hours=25))  # what the alerts worker does
    assert len(mailoutbox) == 1 and run.biz_key in mailoutbox[0].subject
    assert proposal_approve(proposal_id=proposal.id, actor="late", now=T0 + timedelta(hours=25)) is False


def test_it_runs_a_low_risk_action_without_approval(server):
    server.respond(json_completion(GOOD))
    run = make_run(make_agent(server), params={"action": "harness.record"})

    assert execute(run, T0).status == "succeeded"
    assert not ActionProposal.objects.exists() and DiagnosticRecord.objects.count() == 1


def test_it_lets_a_rule_raise_but_never_lower_an_actions_risk(server):
    server.respond(json_completion(GOOD))
    raised = make_run(make_agent(server), params={"action": "harness.record", "action_risk": "medium"})
    lowered = make_run(
        Agent.objects.get(name="writer"),
        biz_key="llm:2",
        params={"action": "harness.record_guarded", "action_risk": "low"},
    )

    assert execute(raised, T0).status == "awaiting_approval"
    assert execute(lowered, T0).status == "awaiting_approval"
    assert sorted(ActionProposal.objects.values_list("risk", flat=True)) == ["high", "medium"]


def test_it_approves_and_rejects_from_the_admin_with_the_user_audited(server, admin_client, admin_user):
    from django.urls import reverse

    from harness_site.audit.models import AuditEntry

    run, proposal = _proposed(server, at=timezone.now())  # the admin decides at the real now
    url = reverse("admin:runs_actionproposal_changelist")
    page = admin_client.get(reverse("admin:runs_taskrun_change", args=[run.id])).content.decode()
    assert "harness.record_guarded" in page and "Awaiting approval" in page  # the proposal shows on the run

    first = admin_client.post(url, {"action": "approve", "_selected_action": [proposal.id]}, follow=True)
    second = admin_client.post(url, {"action": "approve", "_selected_action": [proposal.id]}, follow=True)
    rejected = admin_client.post(url, {"action": "reject", "_selected_action": [proposal.id]}, follow=True)

    assert "1 proposal(s) approved" in first.content.decode()
    assert "already decided" in second.content.decode() and "already decided" in rejected.content.decode()
    proposal.refresh_from_db()
    assert proposal.status == "approved" and proposal.decided_by == admin_user.username
    assert fresh(run).state == TaskRun.State.PENDING
    assert list(AuditEntry.objects.values_list("action", "actor")) == [("proposal.approve", admin_user.username)]


def test_it_refuses_approval_to_a_user_without_the_permission(server, client, django_user_model):
    from django.urls import reverse

    run, proposal = _proposed(server, at=timezone.now())
    viewer = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    from django.contrib.auth.models import Permission

    viewer.user_permissions.add(Permission.objects.get(codename="view_actionproposal"))
    client.force_login(viewer)

    client.post(
        reverse("admin:runs_actionproposal_changelist"),
        {"action": "approve", "_selected_action": [proposal.id]},
        follow=True,
    )

    proposal.refresh_from_db()
    assert proposal.status == "pending" and fresh(run).state == TaskRun.State.AWAITING_APPROVAL


def test_it_runs_a_trial_of_an_llm_rule_as_a_dry_run_with_the_rules_agent_and_schema(server):
    from tasks.triggers.operator import rule_fire

    server.respond(json_completion(GOOD))
    rule = make_rule(
        "summaries",
        skill="llm_json",
        agent=make_agent(server),
        output_schema=SCHEMA,
        params={"prompt": "Summarise.", "action": "harness.record"},
    )

    run = rule_fire(rule=rule, actor="operator", now=T0, trial=True).run
    assert run.agent == "writer" and run.payload["output_schema"] == SCHEMA
    outcome = execute(run, T0)

    assert outcome.status == "succeeded" and fresh(run).result["dry_run"] is True
    assert steps(run)[-1] == ("write_result", 1, True)
    assert len(server.requests) == 1 and DiagnosticRecord.objects.count() == 0


def test_it_lets_exactly_one_of_two_concurrent_approvals_win(server):
    import threading

    from django.db import connection

    run, proposal = _proposed(server)
    barrier = threading.Barrier(2)
    results: list[bool] = []

    def approve(who: str) -> None:
        try:
            barrier.wait(timeout=10)
            results.append(proposal_approve(proposal_id=proposal.id, actor=who, now=T0 + timedelta(minutes=1)))
        finally:
            connection.close()

    threads = [threading.Thread(target=approve, args=(who,)) for who in ("alice", "bob")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)

    assert sorted(results) == [False, True]
    assert execute(run, T0 + timedelta(minutes=1)).status == "succeeded"
    assert DiagnosticRecord.objects.filter(run_id=run.id).count() == 1


def test_it_expires_approvals_from_the_periodic_sweep(server):
    from runs.jobs import sweep_task

    run, _ = _proposed(server, at=timezone.now() - timedelta(hours=25))

    result = sweep_task()  # the beat entry's task body, called in-process

    assert result["approvals_expired"] == 1
    assert fresh(run).state == TaskRun.State.FAILED and DeadLetter.objects.filter(run=run).exists()


# --- provider pacing through the agent's pool ---------------------------------------------------


def test_a_429_with_retry_after_pauses_the_agents_pool_and_the_run_waits_without_counting_an_attempt(server):
    provider = Pool.objects.create(
        name="provider", reason="60 requests a minute", rate_count=60, rate_period_seconds=60
    )
    server.respond(Reply(429, '{"error": "rate"}', {"Retry-After": "30"}), json_completion(GOOD))
    agent = make_agent(server, pool=provider)
    run, other = make_run(agent), make_run(agent, biz_key="llm:2")

    first = execute(run, T0)

    run, provider = fresh(run), Pool.objects.get(id=provider.id)
    assert first.status == "waiting_budget" and provider.paused_until == T0 + timedelta(seconds=30)
    assert run.state == TaskRun.State.WAITING_RETRY and run.run_after == T0 + timedelta(seconds=30)
    assert run.attempts == 0 and run.last_error_kind == "provider_wait"
    assert not DeadLetter.objects.exists()
    # The whole pool waits, not just the run that was told: the other run is not even started.
    assert execute(other, T0 + timedelta(seconds=1)).status == "pool_wait"
    assert len(server.requests) == 1

    assert execute(run, T0 + timedelta(seconds=30)).status == "succeeded"
    assert fresh(run).attempts == 1


def test_an_agents_rate_pool_paces_its_model_calls(server):
    provider = Pool.objects.create(name="provider", reason="1 request a minute", rate_count=1, rate_period_seconds=60)
    server.respond(json_completion(GOOD))
    agent = make_agent(server, pool=provider)
    first, second = make_run(agent), make_run(agent, biz_key="llm:2")

    assert execute(first, T0).status == "succeeded"
    # The run itself was admitted (an agent's rate counts calls, not starts); its call waits for a token.
    assert execute(second, T0).status == "waiting_budget"
    assert fresh(second).run_after == T0 + timedelta(seconds=60) and fresh(second).attempts == 0
    assert len(server.requests) == 1


def test_a_429_pause_counts_from_when_the_provider_answered_not_from_when_the_attempt_started(server):
    # Found by CI: the pause was ctx.now + Retry-After, and ctx.now is the attempt's start. A skill
    # that calls the model 5 s into its attempt paused the pool 5 s short of what the provider asked.
    provider = Pool.objects.create(name="provider", reason="the provider's limit")
    server.respond(Reply(429, '{"error": "rate"}', {"Retry-After": "30"}))
    agent = make_agent(server, pool=provider)
    run = make_run(agent)
    answered = T0 + timedelta(seconds=5)

    run_execute(run_id=run.id, worker="w1", clock=lambda: answered if server.requests else T0, rand=lambda: 0.5)

    assert Pool.objects.get(id=provider.id).paused_until == answered + timedelta(seconds=30)
    assert fresh(run).run_after == answered + timedelta(seconds=30)
