"""The suite's own isolation: what one test leaves in the broker never reaches the next one's workers."""

import pytest
from django.conf import settings

pytestmark = pytest.mark.backend


@pytest.mark.skipif(
    not settings.CELERY_BROKER_URL.startswith("filesystem://"), reason="the file broker's folders (Redis is flushed)"
)
def test_the_purged_broker_drops_what_a_consumer_killed_in_an_earlier_test_held(request):
    # A consumer killed by an earlier test (kill -9) leaves its claimed messages in its claims folder;
    # the next consumer to start puts a dead owner's messages back in the queue.
    held = settings.BROKER_DIR / "claims" / "4242-deadbeef0000"
    held.mkdir(parents=True, exist_ok=True)
    (held / "1764633600000_1_00000000-0000-0000-0000-000000000000.celery.msg").write_text("{}")
    (settings.BROKER_DIR / "queue").mkdir(parents=True, exist_ok=True)
    (settings.BROKER_DIR / "queue" / "left.celery.msg").write_text("{}")

    request.getfixturevalue("purged_broker")

    left = [p.name for sub in ("queue", "claims") for p in (settings.BROKER_DIR / sub).rglob("*.msg")]
    assert left == []
