"""Small desk items: the key template's help reads as text, /favicon.ico answers."""

import pytest
from django.urls import reverse

from tests.support.desk import client_for, make_user
from tests.support.rules import make_rule

pytestmark = pytest.mark.django_db


def test_the_key_template_help_shows_the_namespace_as_text():
    rule = make_rule("every-5", kind="cron", cron="*/5 * * * *", timezone="Asia/Shanghai")
    page = client_for(make_user("olga", "Operators")).get(reverse("admin:tasks_triggerrule_change", args=[rule.pk]))
    assert "rule/&lt;id&gt;/&lt;kind&gt;/" in page.content.decode()


def test_favicon_is_not_a_404(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"].endswith("harness/favicon.svg")


def test_the_page_of_a_run_without_a_ticket_answers():
    from django.utils import timezone

    from tasks.triggers.operator import rule_fire

    rule = make_rule("every-5", kind="cron", cron="*/5 * * * *", timezone="Asia/Shanghai")
    run = rule_fire(rule=rule, actor="olga", now=timezone.now()).run
    page = client_for(make_user("vera", "Viewers")).get(reverse("admin:runs_taskrun_change", args=[run.pk]))
    assert page.status_code == 200
