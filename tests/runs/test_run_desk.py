# ruff: noqa: F811  (pytest fixtures imported from tests.support.desk are redefined as arguments)
"""Run and lease pages of the operator's desk: filters, timeline, retry now, cancel, force-release."""

import html
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.admin import helpers
from django.urls import reverse
from django.utils import timezone
from django.utils.html import strip_tags

from deadletters.models import DeadLetter
from harness_site.audit.models import AuditEntry
from runs.admin.scale import ESTIMATE_ABOVE
from runs.engine import executor, leases
from runs.engine.operations import run_lease_force_release
from runs.models import Attempt, Lease, TaskRun
from tests.support.desk import (  # noqa: F401 - fixtures
    daily_report,
    make_failed_run,
    oncall,
    oncall_client,
    operator,
    operator_client,
    viewer,
    viewer_client,
)

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def _text(response) -> str:
    return html.unescape(response.content.decode())


def _plain(response) -> str:
    return " ".join(strip_tags(_text(response)).split())


def _run(biz_key="k1", **over) -> TaskRun:
    fields = {"biz_key": biz_key, "skill": "harness.noop", "source": "scheduler", "trigger_at": NOW, "run_after": NOW}
    fields.update(over)
    return TaskRun.objects.create(**fields)


def _running(biz_key="k-running", owner="w1@host:42") -> TaskRun:
    run = _run(
        biz_key,
        state="running",
        lease_owner=owner,
        lease_expires_at=timezone.now() + timedelta(minutes=5),
        fence=3,
        attempts=1,
        start_at=NOW,
    )
    Attempt.objects.create(run=run, number=1, fence=3, worker=owner, started_at=NOW)
    return run


def test_it_filters_and_searches_runs(viewer_client):
    rule = daily_report()
    a = _run("report:a", rule=rule, state="failed", source="manual", is_trial=True)
    _run("report:b", state="succeeded")
    url = reverse("admin:runs_taskrun_changelist")
    assert viewer_client.get(url, {"q": "report:a"}).context["cl"].result_count == 1
    assert viewer_client.get(url, {"q": str(a.id)}).context["cl"].result_count == 1
    for params in (
        {"state__exact": "failed"},
        {"source__exact": "manual"},
        {"is_trial__exact": "1"},
        {"rule__id__exact": rule.pk},
        {"trigger_at__gte": "2026-03-02 00:00:00+00:00", "trigger_at__lt": "2026-03-03 00:00:00+00:00"},
    ):
        response = viewer_client.get(url, params)
        assert response.status_code == 200, params
        assert response.context["cl"].result_count == (1 if "trigger_at__gte" not in params else 2), params


def test_it_shows_a_run_as_a_timeline(viewer_client):
    run = make_failed_run("report:t")
    run.trigger_at = NOW - timedelta(seconds=2)
    run.save()
    page = _text(viewer_client.get(reverse("admin:runs_taskrun_change", args=[run.pk])))
    assert 'id="run-timeline-panel"' in page
    assert "queue delay" in page and "2.000s" in page
    assert "w1@host:1" in page and "abc123" in page and "Failed for good" in page
    assert "Payload snapshot" in page and "Policy" in page
    assert re.search(r"<th>Max attempts</th><td>1</td>", page)
    assert "Dead-letter tickets" in page


def _bulk(client, action: str, runs, **extra):
    return client.post(
        reverse("admin:runs_taskrun_changelist"),
        {"action": action, helpers.ACTION_CHECKBOX_NAME: [r.pk for r in runs], **extra},
    )


def test_it_retries_now_after_a_confirmation(operator_client):
    waiting = _run("k-wait", state="waiting_retry", run_after=NOW + timedelta(hours=1))
    done = _run("k-done", state="succeeded")
    confirm = _bulk(operator_client, "retry_now", [waiting, done], index="0")
    assert confirm.status_code == 200
    assert "2 selected; 1 can be changed" in _plain(confirm)
    waiting.refresh_from_db()
    assert waiting.state == "waiting_retry"
    _bulk(operator_client, "retry_now", [waiting, done], post="yes", reason="dependency is back")
    waiting.refresh_from_db()
    assert waiting.state == "pending" and waiting.run_after <= timezone.now()
    assert AuditEntry.objects.get().reason == "dependency is back"


def test_it_retries_a_failed_run_and_marks_its_ticket_replayed(operator_client):
    run = make_failed_run("report:r")
    response = operator_client.post(reverse("admin:runs_taskrun_retry", args=[run.pk]), {"reason": ""})
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.state == "pending" and run.first_failure_at is None
    assert DeadLetter.objects.get().state == "replayed"
    again = operator_client.post(reverse("admin:runs_taskrun_retry", args=[run.pk]), {"reason": ""}, follow=True)
    assert "Nothing changed" in _text(again)
    assert AuditEntry.objects.count() == 1


def test_it_cancels_pending_or_waiting_runs_only(operator_client):
    pending, waiting, running = _run("p"), _run("w", state="waiting_retry"), _running()
    _bulk(operator_client, "cancel", [pending, waiting, running], post="yes", reason="wrong params")
    assert dict(TaskRun.objects.values_list("biz_key", "state")) == {
        "p": "cancelled",
        "w": "cancelled",
        "k-running": "running",
    }
    # A cancelled run can never be claimed by a worker.
    outcome = executor.run_execute(run_id=pending.id, worker="w", clock=timezone.now)
    assert outcome.status == "not_claimable"


def test_it_refuses_run_actions_to_viewers(viewer_client):
    run = _run("k", state="waiting_retry")
    assert viewer_client.post(reverse("admin:runs_taskrun_retry", args=[run.pk]), {}).status_code == 403
    assert viewer_client.post(reverse("admin:runs_taskrun_cancel", args=[run.pk]), {}).status_code == 403
    _bulk(viewer_client, "retry_now", [run], post="yes")
    run.refresh_from_db()
    assert run.state == "waiting_retry"


def test_it_lists_live_leases_with_owner_age_and_expiry(oncall_client):
    run = _running()
    _run("k-idle")
    Lease.objects.create(
        key="object:42",
        owner="w2@host:7",
        token=5,
        acquired_at=timezone.now() - timedelta(minutes=2),
        expires_at=timezone.now() + timedelta(minutes=1),
    )
    page = oncall_client.get(reverse("admin:runs_runlease_changelist"))
    assert page.context["cl"].result_count == 1
    text = _text(page)
    assert run.biz_key in text and "w1@host:42" in text and "Held for" in text
    leases = _text(oncall_client.get(reverse("admin:runs_lease_changelist")))
    assert "w2@host:7" in leases and "live" in leases and "2.0 min" in leases


def test_it_force_releases_a_run_lease_so_the_old_holder_cannot_commit(oncall_client, oncall):
    run = _running()
    url = reverse("admin:runs_taskrun_release", args=[run.pk])
    assert "the fence is bumped" in _text(oncall_client.get(url))
    no_reason = oncall_client.post(url, {"reason": ""})
    assert no_reason.status_code == 200 and "This field is required." in _text(no_reason)
    assert oncall_client.post(url, {"reason": "worker host is dead"}).status_code == 302
    run.refresh_from_db()
    assert (run.state, run.fence, run.lease_owner, run.lease_expires_at) == ("waiting_retry", 4, "", None)
    assert Attempt.objects.get().outcome == "fenced"
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.action, entry.reason, entry.details["owner"]) == (
        "omar",
        "lease.force_release",
        "worker host is dead",
        "w1@host:42",
    )
    # The old holder's commit is fenced out.
    with pytest.raises(leases.LeaseLost), leases.fenced(run_id=run.id, fence=3):
        pass
    assert run_lease_force_release(run_id=run.id, actor=oncall, now=timezone.now(), reason="again") is False


def test_it_force_releases_a_key_lease_in_bulk_with_a_reason(oncall_client):
    lease = Lease.objects.create(key="rule:r", owner="w2", token=5, acquired_at=NOW, expires_at=NOW + timedelta(days=1))
    url = reverse("admin:runs_lease_changelist")
    missing = oncall_client.post(
        url, {"action": "force_release", helpers.ACTION_CHECKBOX_NAME: [lease.pk], "post": "yes", "reason": ""}
    )
    assert missing.status_code == 200 and "This field is required." in _text(missing)
    oncall_client.post(
        url, {"action": "force_release", helpers.ACTION_CHECKBOX_NAME: [lease.pk], "post": "yes", "reason": "stuck"}
    )
    lease.refresh_from_db()
    assert (lease.owner, lease.token) == ("", 6)
    assert AuditEntry.objects.get().target_type == "lease"


def test_it_refuses_force_release_to_operators_and_viewers(operator_client, viewer_client):
    run = _running()
    for client in (operator_client, viewer_client):
        assert client.post(reverse("admin:runs_taskrun_release", args=[run.pk]), {"reason": "x"}).status_code == 403
    run.refresh_from_db()
    assert run.state == "running"


def test_a_trace_id_from_a_log_line_finds_its_run_and_error_kinds_are_named(viewer_client):
    traced = _run("report:traced", trace_id="4bf92f3577b34da6a3ce929d0e0e4736")
    _run("report:other", trace_id="00f067aa0ba902b700f067aa0ba902b7")
    url = reverse("admin:runs_taskrun_changelist")
    found = viewer_client.get(url, {"q": "4BF92F3577B34DA6A3CE929D0E0E4736"}).context["cl"]
    assert [r.id for r in found.result_list] == [traced.id]
    # The error-kind filter offers the whole vocabulary by name, the code in the link.
    page = _text(viewer_client.get(url))
    assert "last_error_kind=provider_wait" in page and "waiting for the provider" in page


def test_the_run_list_never_counts_from_statistics_a_table_no_longer_has(viewer_client):
    """The unfiltered list estimates its count on a big table; the planner's statistic is taken by
    ANALYZE and stays after the rows go (a retention delete, a rolled-back bulk insert). A list of
    one run says 1, not the 10,500 the table held when it was analysed."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("the planner's statistics are PostgreSQL's")
    now = timezone.now()
    base = {"skill": "harness.noop", "source": "api", "trigger_at": now, "run_after": now}
    big = ESTIMATE_ABOVE + 500
    TaskRun.objects.bulk_create([TaskRun(biz_key=f"bulk:{i}", **base) for i in range(big)], batch_size=5000)
    url = reverse("admin:runs_taskrun_changelist")
    with connection.cursor() as cur:  # what autovacuum does while the rows are there
        cur.execute(f"ANALYZE {TaskRun._meta.db_table}")
    assert viewer_client.get(url).context["cl"].result_count > ESTIMATE_ABOVE  # big: estimated
    keep = TaskRun.objects.order_by("id").first()
    TaskRun.objects.exclude(pk=keep.pk).delete()

    assert viewer_client.get(url).context["cl"].result_count == 1
