"""Every desk page needs the permissions of the data it shows: a staff user in no group (staff, so
the admin lets them in, but granted nothing) is refused each page with 403, and a Viewer, who may
view everything on the desk, reads each one. The 403 names the missing permission."""

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from deadletters.models import DeadLetter
from runs.views import DASHBOARD_PERMS
from tests.support.desk import client_for, daily_report, make_failed_run, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def objects():
    rule = daily_report()
    run = make_failed_run(rule=rule)
    return {"rule": rule.id, "run": run.id, "ticket": DeadLetter.objects.get(run=run).id}


# (url name, argument key, what a reader needs): the pages that show data, each its own test case.
READ_PAGES = [
    ("harness-dashboard", None),
    ("harness-flow", None),
    ("admin:index", None),
    ("admin:runs_taskrun_changelist", None),
    ("admin:runs_taskrun_change", "run"),
    ("admin:tasks_triggerrule_changelist", None),
    ("admin:tasks_triggerrule_change", "rule"),
    ("admin:tasks_triggerrule_explain", "rule"),
    ("admin:tasks_triggerrule_preview", None),
    ("admin:deadletters_deadletter_changelist", None),
    ("admin:deadletters_deadletter_change", "ticket"),
]
# Pages that change something: a Viewer, who may only look, is refused them too.
ACTION_PAGES = [
    ("admin:runs_taskrun_retry", "run"),
    ("admin:runs_taskrun_cancel", "run"),
    ("admin:runs_taskrun_release", "run"),
    ("admin:tasks_triggerrule_run_now", "rule"),
    ("admin:tasks_triggerrule_trial", "rule"),
    ("admin:tasks_triggerrule_pause", "rule"),
    ("admin:tasks_triggerrule_backfill", "rule"),
    ("admin:deadletters_deadletter_replay", "ticket"),
    ("admin:deadletters_deadletter_close", "ticket"),
    ("admin:deadletters_deadletter_assign", "ticket"),
]


PREVIEW_QUERY = "?kind=cron&cron=0+9+*+*+*&timezone=UTC&dst_gap=shift&dst_repeat=first"


def url_of(name, key, objects):
    url = reverse(name, args=[objects[key]] if key else [])
    return url + PREVIEW_QUERY if name == "admin:tasks_triggerrule_preview" else url


def data_shown(response) -> bool:
    """Whether the page answered with desk data rather than a refusal."""
    return response.status_code == 200 and b"daily-report" in response.content


@pytest.mark.parametrize(("name", "key"), READ_PAGES + ACTION_PAGES)
def test_a_staff_user_in_no_group_is_refused_every_desk_page(objects, name, key):
    response = client_for(make_user("nobody")).get(url_of(name, key, objects))
    if name == "admin:index":
        # The index is the way in: links to the desk's pages, but no data from them.
        assert response.status_code == 200 and b"daily-report" not in response.content
        return
    assert response.status_code == 403, (name, response.status_code)
    assert not data_shown(response)


@pytest.mark.parametrize(("name", "key"), READ_PAGES)
def test_a_viewer_reads_every_desk_page(objects, name, key):
    response = client_for(make_user("vera", "Viewers")).get(url_of(name, key, objects))
    assert response.status_code == 200, (name, response.status_code)


@pytest.mark.parametrize(("name", "key"), ACTION_PAGES)
def test_a_viewer_is_refused_every_page_that_changes_something(objects, name, key):
    response = client_for(make_user("vera", "Viewers")).get(url_of(name, key, objects))
    assert response.status_code == 403, (name, response.status_code)


@pytest.mark.parametrize("perm", DASHBOARD_PERMS)
def test_the_dashboard_needs_each_permission_of_the_data_it_shows(perm):
    daily_report()
    user = make_user("partial")
    app_label, codename = perm.split(".")
    others = [p for p in DASHBOARD_PERMS if p != perm]
    user.user_permissions.add(
        *(Permission.objects.get(content_type__app_label=a, codename=c) for a, c in (p.split(".") for p in others))
    )
    response = client_for(user).get(reverse("harness-dashboard"))
    assert response.status_code == 403
    # The 403 page names what is missing and the roles that have it.
    assert perm.encode() in response.content or b"Viewers" in response.content
    user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    user = type(user).objects.get(pk=user.pk)  # a fresh permission cache
    assert client_for(user).get(reverse("harness-dashboard")).status_code == 200


def test_the_display_zone_switch_shows_no_data_and_only_sets_the_users_own_preference():
    response = client_for(make_user("nobody")).post(reverse("harness-display-zone"), {"zone": "utc", "next": "/x"})
    assert response.status_code == 302 and response["Location"] == "/x"
