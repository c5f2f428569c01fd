# ruff: noqa: F811  (pytest fixtures imported from tests.support.desk are redefined as arguments)
"""What operators see of flow control: the pool admin (audited, Operators may edit, the
global pool stays), the flow page, explain's "why is this run waiting", /healthz and the dashboard."""

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from runs.desk.selectors import flow_saturation, pool_pressure
from runs.engine.admission import pool_admit
from runs.engine.claims import Work, run_claim
from runs.engine.executor import run_execute
from runs.engine.store import store
from runs.models import Decision, SchedulerTick, TaskRun
from tasks.models import GLOBAL_POOL, Pool
from tasks.rules import keys
from tasks.triggers.explain import slot_explain
from tests.support.desk import (  # noqa: F401
    daily_report,
    operator,
    operator_client,
    viewer,
    viewer_client,
)
from tests.support.runs import run_policy

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TTL = timedelta(seconds=60)


def claim(rule, n: int, *, by: str = "tests", slot=None, now=T0) -> TaskRun:
    return run_claim(
        Work(
            biz_key=keys.scoped(rule.pk, keys.MANUAL_KEY, f"{by}:{n}"),
            skill=rule.skill,
            source=TaskRun.Source.API,
            triggered_by=by,
            payload={"params": {}},
            policy=run_policy({"lease_ttl_seconds": 60}),
            rule=rule,
            slot=slot,
        ),
        now=now,
        dispatch=False,
    ).run


def busy_pool(now=T0):
    """A pool of one held by a running run, with two runs waiting for it."""
    one = Pool.objects.create(name="one", reason="one at a time", max_concurrency=1)
    rule = daily_report(name="flow")
    rule.pools.set([one])
    holder = claim(rule, 0, now=now)
    assert pool_admit(holder, worker="w", now=now, ttl=TTL).admitted
    store().lease_claim(holder, worker="w", now=now, plain=False)
    waiting = [claim(rule, i, slot=now + timedelta(minutes=i), now=now) for i in (1, 2)]
    for i, run in enumerate(waiting):
        assert (
            run_execute(run_id=run.id, worker="w", clock=lambda i=i: now + timedelta(seconds=i)).status == "pool_wait"
        )
    return one, rule, holder, waiting


def pool_form(pool: Pool, **over) -> dict:
    data = {
        "name": pool.name,
        "enabled": "on",
        "reason": pool.reason,
        "max_concurrency": pool.max_concurrency or "",
        "key_template": pool.key_template,
        "rate_count": pool.rate_count or "",
        "rate_period_seconds": pool.rate_period_seconds or "",
        "rate_burst": pool.rate_burst or "",
    }
    data.update(over)
    return data


def test_an_operator_changes_a_limit_in_the_admin_and_the_change_is_in_the_history(operator_client):
    one = Pool.objects.create(name="one", reason="start small", max_concurrency=1)

    response = operator_client.post(
        reverse("admin:tasks_pool_change", args=[one.id]),
        pool_form(one, max_concurrency=4, reason="provider raised it"),
    )

    assert response.status_code == 302
    one.refresh_from_db()
    assert one.max_concurrency == 4
    history = list(one.history.order_by("history_date").values_list("max_concurrency", "history_user__username"))
    assert history == [(1, None), (4, "olga")]


def test_a_bad_key_template_is_a_message_on_the_form_not_a_500(operator_client):
    response = operator_client.post(
        reverse("admin:tasks_pool_add"), pool_form(Pool(name="p", reason="r"), key_template="{tenant_id}")
    )
    assert response.status_code == 200
    assert "Unknown placeholder {tenant_id}" in response.content.decode()
    assert not Pool.objects.filter(name="p").exists()


def test_the_global_pool_cannot_be_deleted_or_renamed_from_the_admin(client, django_user_model):
    admin = django_user_model.objects.create_superuser("root", "r@example.com", "pw")
    client.force_login(admin)
    glob = Pool.objects.get(name=GLOBAL_POOL)

    assert client.get(reverse("admin:tasks_pool_delete", args=[glob.id])).status_code == 403
    client.post(reverse("admin:tasks_pool_change", args=[glob.id]), pool_form(glob, name="renamed"))
    assert Pool.objects.filter(name=GLOBAL_POOL).exists()


def test_the_flow_page_shows_limit_in_use_waiting_shed_and_the_oldest_waiting_run(viewer_client):
    _one, rule, _holder, waiting = busy_pool(now=timezone.now())
    now = timezone.now()
    Decision.objects.create(rule=rule, slot=now, reason="shed", details={"pool": "one"}, created_at=now)
    Decision.objects.create(rule=rule, slot=now + timedelta(seconds=1), reason="coalesced", details={}, created_at=now)

    rows = {r["name"]: r for r in pool_pressure(now=now)}
    response = viewer_client.get(reverse("harness-flow"))

    assert rows["one"]["in_use"] == 1 and rows["one"]["limit"] == 1 and rows["one"]["saturated"]
    assert rows["one"]["waiting"] == 2 and rows["one"]["waiting_by_key"] == [("", 2)]
    assert rows["one"]["shed_1h"] == 1 and rows["one"]["coalesced_1h"] == 0
    assert rows["global"]["coalesced_1h"] == 1  # a decision naming no pool counts on the global pool
    assert rows["one"]["oldest_waiting"]["run_id"] == waiting[0].id
    assert response.status_code == 200
    page = response.content.decode()
    assert 'id="flow-one"' in page and waiting[0].biz_key in page and "At their limit:" in page


def test_the_flow_page_needs_the_view_pool_permission(client, django_user_model):
    staff = django_user_model.objects.create_user("staff", password="pw", is_staff=True)
    client.force_login(staff)
    assert client.get(reverse("harness-flow")).status_code == 403


def test_explain_says_which_pool_a_run_waits_for_and_how_full_it_is():
    _one, rule, _holder, waiting = busy_pool()

    result = slot_explain(rule=rule, slot=waiting[1].slot, now=T0 + timedelta(seconds=5))

    assert result["outcome"] == "run"
    assert "waiting for pool one: 1 of 1 in use, 1 waiting ahead" in result["summary"]
    assert result["details"]["waiting_for"]["reason"] == "concurrency"


def test_explain_says_when_a_run_waits_for_a_rate_token_or_a_provider_pause():
    rate = Pool.objects.create(name="rate", reason="r", rate_count=1, rate_period_seconds=60)
    rule = daily_report(name="paced")
    rule.pools.set([rate])
    first, second = claim(rule, 1, slot=T0), claim(rule, 2, slot=T0 + timedelta(minutes=1))
    assert run_execute(run_id=first.id, worker="w", clock=lambda: T0).status == "succeeded"
    assert run_execute(run_id=second.id, worker="w", clock=lambda: T0).status == "pool_wait"

    rated = slot_explain(rule=rule, slot=second.slot, now=T0)
    Pool.objects.filter(id=rate.id).update(paused_until=T0 + timedelta(minutes=5))
    assert run_execute(run_id=second.id, worker="w", clock=lambda: T0 + timedelta(minutes=1)).status == "pool_wait"
    paused = slot_explain(rule=rule, slot=second.slot, now=T0 + timedelta(minutes=1))

    assert "rate 1/60s, next start at" in rated["summary"]
    assert "paused by the model provider" in paused["summary"]


def test_healthz_and_the_dashboard_show_saturation_without_failing(admin_client, viewer_client):
    busy_pool(now=timezone.now())
    SchedulerTick.objects.update_or_create(name="scheduler", defaults={"last_tick_at": timezone.now()})

    health = admin_client.get("/healthz").json()  # the details: a staff session
    dashboard = viewer_client.get(reverse("harness-dashboard")).content.decode()

    assert health["flow"]["saturated_pools"] == ["one"] and health["flow"]["waiting_for_pool"] == 2
    assert flow_saturation(now=timezone.now())["saturated_pools"] == ["one"]
    assert 'id="dash-flow-waiting">2<' in dashboard and "At their limit:" in dashboard


def test_the_run_page_says_which_pool_the_run_waits_for(viewer_client):
    _one, _rule, _holder, waiting = busy_pool(now=timezone.now())

    page = viewer_client.get(reverse("admin:runs_taskrun_change", args=[waiting[1].id])).content.decode()

    assert "waiting for pool one: 1 of 1 in use, 1 waiting ahead" in page
