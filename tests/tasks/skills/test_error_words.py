"""Error kinds are worded in the reader's language on the ticket, the dead-letter desk and the run
pages, by the same words as the run list's filter (runs.admin.scale.error_kind_label)."""

import pytest
from django.urls import reverse

from deadletters.models import DeadLetter
from tests.support.desk import client_for, make_failed_run, make_user
from tests.support.zh_complete import _Text

pytestmark = pytest.mark.django_db


def visible(html: str) -> str:
    parser = _Text()
    parser.feed(html)
    return " ".join(parser.chunks)


@pytest.mark.parametrize(("accept", "words"), [("zh-Hans", "参数无效"), ("en", "invalid parameter")])
def test_an_error_kind_is_worded_where_on_call_reads_it(accept, words):
    run = make_failed_run(kind="invalid_param")
    ticket = DeadLetter.objects.get(run=run)
    oncall = client_for(make_user("omar", "On-call"))
    pages = {
        "ticket": reverse("admin:deadletters_deadletter_change", args=[ticket.pk]),
        "desk": reverse("admin:deadletters_deadletter_changelist") + "?state__exact=pending_manual",
        "run": reverse("admin:runs_taskrun_change", args=[run.pk]),
        "runs": reverse("admin:runs_taskrun_changelist"),
    }
    for name, url in pages.items():
        text = visible(oncall.get(url, HTTP_ACCEPT_LANGUAGE=accept).content.decode())
        assert words in text, name
        assert "invalid_param" not in text, name
