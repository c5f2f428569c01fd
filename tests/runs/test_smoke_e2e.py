import pytest

from runs.models import TaskRun
from tasks.models import TriggerRule
from tests.support.processes import wait_for


@pytest.mark.e2e
def test_it_runs_an_interval_rule_end_to_end(harness):
    TriggerRule.objects.create(
        name="every-2s",
        reason="test",
        kind="interval",
        interval_seconds=2,
        timezone="UTC",
        dedupe_key_template="{rule}:{slot}",
        skill="harness.record",
    )
    harness.worker()
    harness.beat()
    wait_for(lambda: TaskRun.objects.filter(state="succeeded").count() >= 3, timeout=40, what="3 succeeded runs")
