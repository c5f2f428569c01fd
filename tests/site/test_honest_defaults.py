"""Honest defaults on a fresh install: no link to a page that does not exist, django-celery-beat's
schedule pages hidden (rules schedule work), API tokens made, scoped, listed and revoked in the admin."""

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.urls import reverse
from django_celery_beat.models import CrontabSchedule, PeriodicTask

from harness_site.api.tokens import token_hash
from runs.models import Backpressure
from tasks.models import ApiToken, Pool
from tests.support.desk import make_failed_run, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(client):
    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw-root-123456")
    client.force_login(user)
    return user


def test_the_admin_links_to_no_public_site_and_hides_the_beat_schedules(client, root):
    page = client.get(reverse("admin:index")).content.decode()
    assert "View site" not in page and 'href="/"' not in page
    assert "django_celery_beat" not in page and "Periodic tasks" not in page
    assert not admin.site.is_registered(PeriodicTask) and not admin.site.is_registered(CrontabSchedule)
    assert client.get("/admin/django_celery_beat/periodictask/").status_code == 404


def test_a_token_is_created_with_its_scopes_in_the_admin_shown_once_and_revoked(client, root):
    response = client.post(
        reverse("admin:tasks_apitoken_add"),
        {"name": "ci-deploy", "user": root.pk, "scopes": ["rules:read", "runs:write"]},
        follow=True,
    )
    assert response.status_code == 200
    token = ApiToken.objects.get()
    assert (token.name, token.scopes) == ("ci-deploy", ["rules:read", "runs:write"])
    secret = response.content.decode().split('<code id="new-token">')[1].split("</code>")[0]
    assert secret.startswith("hk_") and token.token_hash == token_hash(secret)
    listed = client.get(reverse("admin:tasks_apitoken_changelist")).content.decode()
    assert "ci-deploy" in listed and secret not in listed
    # The API takes it, narrowed to its scopes.
    auth = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    assert client.get("/api/v1/rules", **auth).status_code == 200
    assert client.get("/api/v1/deadletters", **auth).status_code == 403
    client.post(
        reverse("admin:tasks_apitoken_changelist"),
        {"action": "delete_selected", "_selected_action": [token.pk], "post": "yes"},
    )
    assert not ApiToken.objects.exists()
    client.logout()
    assert client.get("/api/v1/rules", **auth).status_code == 401


def test_a_token_form_without_scopes_is_refused_with_a_message(client, root):
    response = client.post(reverse("admin:tasks_apitoken_add"), {"name": "x", "user": root.pk})
    assert response.status_code == 200 and response.context["adminform"].form.errors["scopes"]
    assert not ApiToken.objects.exists()


def test_only_a_superuser_mints_a_token_for_somebody_else(client, root):
    staff = make_user("sam")
    staff.user_permissions.add(*Permission.objects.filter(codename__in=["add_apitoken", "view_apitoken"]))
    client.force_login(staff)
    response = client.post(reverse("admin:tasks_apitoken_add"), {"name": "x", "user": root.pk, "scopes": ["*"]})
    assert response.status_code == 200 and "user" in response.context["adminform"].form.errors
    assert not ApiToken.objects.exists()


def test_no_red_cross_for_a_run_that_is_not_a_trial_nor_for_a_pool_that_is_not_shedding(client, root):
    make_failed_run("report:a")
    runs = client.get(reverse("admin:runs_taskrun_changelist")).content.decode()
    assert "icon-no.svg" not in runs and "icon-yes.svg" not in runs
    row = Backpressure.objects.first() or Backpressure.objects.create(pool=Pool.objects.first())
    listed = client.get(reverse("admin:runs_backpressure_changelist")).content.decode()
    page = client.get(reverse("admin:runs_backpressure_change", args=[row.pk])).content.decode()
    assert "icon-no.svg" not in listed and "icon-no.svg" not in page
    Backpressure.objects.filter(pk=row.pk).update(shedding=True)
    listed = client.get(reverse("admin:runs_backpressure_changelist")).content.decode()
    assert '<span class="flag warn">shedding</span>' in listed
