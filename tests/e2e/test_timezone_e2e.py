"""The rule's zone decides, never the host's (invariant 4): processes run under TZ=America/New_York."""

import json
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from runs.models import TaskRun
from tasks.models import DiagnosticRecord, TriggerRule
from tests.e2e.helpers import wait_finished, wait_run_of, wait_ticking

pytestmark = [pytest.mark.e2e, pytest.mark.one_pass("sqlite")]

HOST_ZONE = {"TZ": "America/New_York"}
SHANGHAI = ZoneInfo("Asia/Shanghai")
ON_TIME_GRACE = timedelta(seconds=10)


def _next_0100_utc(after: datetime) -> datetime:
    at = after.astimezone(UTC).replace(hour=1, minute=0, second=0, microsecond=0)
    return at if at > after else at + timedelta(days=1)


def test_a_0900_shanghai_rule_fires_at_0100_utc_whatever_the_host_zone(harness, tmp_path):
    rules = tmp_path / "rules.json"
    rules.write_text(
        json.dumps(
            {
                "version": 1,
                "rules": [
                    {
                        "name": "shanghai-0900",
                        "reason": "end-to-end: the rule's zone, not the host's",
                        "kind": "cron",
                        "cron": "0 9 * * *",
                        "timezone": "Asia/Shanghai",
                        "skill": "harness.record",
                        "dedupe_key_template": "{rule}:{business_date}:{slot}",
                        "catchup": "latest",
                        "catchup_max_delay_seconds": 86400,
                    }
                ],
            }
        )
    )
    before = timezone.now()
    imported = harness.manage("harness", "rules", "import", str(rules), extra_env=HOST_ZONE)
    after = timezone.now()
    assert imported.returncode == 0, imported.stderr
    rule = TriggerRule.objects.get(name="shanghai-0900")
    assert rule.next_fire_at in {_next_0100_utc(before), _next_0100_utc(after)}, rule.next_fire_at
    assert (rule.next_fire_at.astimezone(UTC).hour, rule.next_fire_at.minute) == (1, 0)

    # Fire now instead of at 01:00 UTC: make the most recent 01:00 UTC the due slot, caught up as "latest".
    slot = rule.next_fire_at - timedelta(days=1)
    TriggerRule.objects.filter(pk=rule.pk).update(next_fire_at=slot)
    harness.worker(extra_env=HOST_ZONE)
    harness.beat(extra_env=HOST_ZONE)
    wait_ticking()
    run = wait_finished(wait_run_of(rule))

    local = slot.astimezone(SHANGHAI)
    print(
        f"\n[e2e timezone] slot {run.slot:%Y-%m-%d %H:%M} UTC = {local:%Y-%m-%d %H:%M %Z}; biz_key {run.biz_key}; "
        f"source {run.source}"
    )
    assert run.state == TaskRun.State.SUCCEEDED, run.last_error
    assert run.slot == slot and (run.slot.hour, run.slot.minute) == (1, 0)
    assert (local.hour, local.minute) == (9, 0)
    assert (
        run.biz_key
        == f"rule/{run.rule_id}/slot/shanghai-0900:{local.date().isoformat()}:{local.date().isoformat()}T09:00:00+08:00"
    )
    assert "T09:00:00+08:00" in run.biz_key
    late = run.trigger_at - slot > ON_TIME_GRACE
    assert run.source == (TaskRun.Source.CATCHUP if late else TaskRun.Source.SCHEDULER)
    rule.refresh_from_db()
    assert rule.last_slot_at == slot
    assert rule.next_fire_at == slot + timedelta(days=1)
    assert DiagnosticRecord.objects.filter(biz_key=run.biz_key).count() == 1
