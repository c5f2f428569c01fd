"""The operator's desk pages through Django's test client, on both databases: times say
their zone, the display zone is remembered per user, live refresh stops once a run is final, the
rule's history strip, honest confirmations, the 403 page naming the role, quick filters, assign to me."""
# ruff: noqa: F811  (pytest fixtures imported from tests.support.desk)

import html
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import timezone

from deadletters.models import DeadLetter
from harness_site.audit.models import DeskPreference
from runs.models import Decision, TaskRun
from tasks.triggers.operator import rule_pause
from tests.support.desk import (  # noqa: F401  (the role fixtures)
    client_for,
    make_failed_run,
    make_rule,
    oncall,
    oncall_client,
    operator,
    operator_client,
    viewer,
    viewer_client,
)

pytestmark = pytest.mark.django_db

SLOT = datetime(2026, 12, 2, 1, 0, tzinfo=UTC)  # 09:00 in Shanghai


def _page(response) -> str:
    assert response.status_code == 200, response.status_code
    return html.unescape(response.content.decode())


def _text(response) -> str:
    """The page without its tags: what a reader sees."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", _page(response)))


@pytest.fixture
def shanghai_run():
    rule = make_rule(cron="0 9 * * *", timezone="Asia/Shanghai")
    run = make_failed_run("rule/1/report:2026-12-02", now=SLOT, rule=rule)
    TaskRun.objects.filter(pk=run.pk).update(slot=SLOT)
    run.refresh_from_db()
    return run


def test_a_run_page_shows_its_times_in_the_rules_zone_with_utc_beside_them(viewer_client, shanghai_run):
    page = _text(viewer_client.get(reverse("admin:runs_taskrun_change", args=[shanghai_run.pk])))
    assert "2026-12-02 09:00:00 CST (01:00:00 UTC)" in page
    # Explain is one click away, for this run's slot.
    assert "/explain/?slot=2026-12-02T01%3A00%3A00%2B00%3A00" in _page(
        viewer_client.get(reverse("admin:runs_taskrun_change", args=[shanghai_run.pk]))
    )
    # Lists without a rule in context: UTC, labelled, to the second.
    listing = _page(viewer_client.get(reverse("admin:runs_taskrun_changelist")))
    assert "2026-12-02 01:00:00 UTC" in listing


def test_the_display_zone_is_remembered_per_user(viewer, viewer_client, shanghai_run):
    url = reverse("admin:runs_taskrun_change", args=[shanghai_run.pk])
    response = viewer_client.post(reverse("harness-display-zone"), {"zone": "utc", "next": url})
    assert response.status_code == 302 and response["Location"] == url
    assert DeskPreference.objects.get(user=viewer).display_zone == "utc"
    assert "2026-12-02 01:00:00 UTC (09:00:00 CST)" in _text(viewer_client.get(url))
    # Another session of the same user reads the same choice.
    assert "2026-12-02 01:00:00 UTC (09:00:00 CST)" in _text(client_for(viewer).get(url))
    # The browser's zone, as the page's script reports it; an unknown zone is ignored (UTC).
    viewer_client.post(reverse("harness-display-zone"), {"zone": "browser", "browser_zone": "Europe/Berlin"})
    assert "2026-12-02 02:00:00 CET (01:00:00 UTC)" in _text(viewer_client.get(url))
    viewer_client.post(reverse("harness-display-zone"), {"zone": "browser", "browser_zone": "../../etc/passwd"})
    assert DeskPreference.objects.get(user=viewer).browser_zone == ""
    # An off-site "next" is not followed.
    away = viewer_client.post(reverse("harness-display-zone"), {"zone": "rule", "next": "https://evil.example/"})
    assert away["Location"] == "/admin/"


def test_a_run_page_refreshes_itself_until_the_run_is_final(viewer_client, shanghai_run):
    url = reverse("admin:runs_taskrun_change", args=[shanghai_run.pk])
    final = _page(viewer_client.get(url))
    assert 'id="live-region"' in final and "hx-get" not in final.split('id="live-region"')[1][:200]
    TaskRun.objects.filter(pk=shanghai_run.pk).update(state="pending", finish_at=None)
    live = _page(viewer_client.get(url, headers={"HX-Request": "true"}))
    assert f'hx-get="{url}"' in live and 'hx-select="#live-region"' in live
    # The pinned htmx is served by us, not a CDN.
    assert "/static/django_htmx/htmx-2.min.js" in live and "unpkg" not in live and "cdn" not in live.lower()


def test_the_rule_page_has_a_status_header_and_a_48_cell_history_strip(operator, operator_client):
    rule = make_rule(cron="0 9 * * *", timezone="Asia/Shanghai")
    for i in range(3):
        TaskRun.objects.create(
            biz_key=f"k{i}",
            rule=rule,
            rule_name=rule.name,
            skill="harness.noop",
            source="scheduler",
            slot=SLOT + timedelta(days=i),
            trigger_at=SLOT + timedelta(days=i),
            run_after=SLOT,
            state="succeeded",
        )
    decision = Decision.objects.create(rule=rule, slot=SLOT + timedelta(days=3), reason="calendar", created_at=SLOT)
    rule_pause(rule=rule, actor=operator, now=timezone.now(), reason="upstream outage")
    page = _page(operator_client.get(reverse("admin:tasks_triggerrule_change", args=[rule.pk])))
    strip = page.split('id="rule-history"')[1].split("</div>")[0]
    assert strip.count("<a ") == 4 and strip.count("<span></span>") == 44
    assert reverse("admin:runs_decision_change", args=[decision.pk]) in strip
    assert "Paused by olga" in page and "upstream outage" in page
    # Pausing only through Pause (with a reason): the Enabled box is read-only on a saved rule.
    assert 'name="enabled"' not in page
    # One next-fires table, with the guards.
    assert page.count('class="preview-fires') == 1 and 'id="guard-preview"' in page


def test_confirmations_say_what_the_button_does_and_messages_the_new_state(oncall_client):
    make_failed_run("report:a")
    ticket = DeadLetter.objects.get()
    url = reverse("admin:deadletters_deadletter_close", args=[ticket.pk])
    page = _page(oncall_client.get(url))
    assert 'value="Close ticket"' in page and "Yes, closed" not in page
    done = oncall_client.post(url, {"note": "known upstream bug"}, follow=True)
    text = _page(done)
    message = text.split("messagelist")[1][:300]
    assert f"Closed: #{ticket.pk} report:a." in text and "(Pending manual action)" not in message
    # The ticket page's own button does not read "Close" beside the page's Close (back to the list).
    ticket_page = _page(oncall_client.get(reverse("admin:deadletters_deadletter_change", args=[ticket.pk])))
    assert ">Close without replay<" not in ticket_page  # closed now: no button at all
    make_failed_run("report:b")
    other = DeadLetter.objects.get(biz_key="report:b")
    assert ">Close without replay<" in _page(
        oncall_client.get(reverse("admin:deadletters_deadletter_change", args=[other.pk]))
    )


def test_a_refused_action_is_a_403_page_in_admin_chrome_naming_the_role(viewer_client):
    make_failed_run("report:a")
    ticket = DeadLetter.objects.get()
    response = viewer_client.get(reverse("admin:deadletters_deadletter_replay", args=[ticket.pk]))
    assert response.status_code == 403
    page = html.unescape(response.content.decode())
    assert 'id="site-name"' in page and "deadletters.replay_deadletter" in page
    assert "The role On-call has it" in page
    zh = viewer_client.get(
        reverse("admin:deadletters_deadletter_replay", args=[ticket.pk]), headers={"accept-language": "zh-hans"}
    )
    assert zh.status_code == 403 and "值班" in zh.content.decode()


def test_quick_filters_and_one_rule_filter_on_the_runs_list(viewer_client):
    now = timezone.now()
    make_rule()  # a rule to filter by
    make_failed_run("report:recent", now=now - timedelta(minutes=10))
    make_failed_run("report:old", now=now - timedelta(hours=5))
    page = _page(viewer_client.get(reverse("admin:runs_taskrun_changelist") + "?quick=failed_1h"))
    assert "report:recent" in page and "report:old" not in page
    cl = viewer_client.get(reverse("admin:runs_taskrun_changelist")).context["cl"]
    titles = [str(f.title) for f in cl.filter_specs]
    assert titles.count("rule") == 1 and "rule name" not in titles


def test_assign_to_me_on_the_desk(oncall, oncall_client):
    make_failed_run("report:a")
    ticket = DeadLetter.objects.get()
    response = oncall_client.post(
        reverse("admin:deadletters_deadletter_changelist"),
        {"action": "assign_to_me", "_selected_action": [ticket.pk]},
        follow=True,
    )
    assert "1 ticket is now assigned to you." in _page(response)
    ticket.refresh_from_db()
    assert ticket.owner == oncall


def test_the_dashboard_chart_names_the_zone_its_hours_are_in(viewer, viewer_client):
    # Runs at 13:xx UTC, read by someone whose display zone is the browser's, Asia/Shanghai: 21:00 CST.
    now = timezone.now().replace(minute=30, second=0, microsecond=0)
    TaskRun.objects.create(
        biz_key="k:chart", skill="harness.noop", source="scheduler", trigger_at=now, run_after=now, state="succeeded"
    )
    viewer.user_permissions.add(*Permission.objects.filter(codename__in=["view_pool", "view_alert"]))
    viewer_client.post(reverse("harness-display-zone"), {"zone": "browser", "browser_zone": "Asia/Shanghai"})
    page = _page(viewer_client.get(reverse("harness-dashboard")))
    hour = now.replace(minute=0)
    shanghai = (hour + timedelta(hours=8)).strftime("%H:%M")
    assert f'title="{shanghai} CST: 1 runs"' in page, re.findall(r'title="[^"]*runs"', page)[-3:]
    assert f"{hour:%H:%M} UTC: " not in page
    viewer_client.post(reverse("harness-display-zone"), {"zone": "utc"})
    page = _page(viewer_client.get(reverse("harness-dashboard")))
    assert f'title="{hour:%H:%M} UTC: 1 runs"' in page
