"""A client generated from the served schema by openapi-python-client (a generator nobody here
wrote), in a temporary folder, creates a rule and a delayed run and reads a problem document."""

import importlib
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from django.utils import timezone

from harness_site.api.tokens import token_create
from runs.models import TaskRun
from tasks.models import TriggerRule
from tests.support.desk import make_user

pytestmark = [pytest.mark.backend]


def _generate(schema_url: str, folder: Path) -> str:
    schema = folder / "openapi.json"
    schema.write_bytes(httpx.get(schema_url, timeout=30).raise_for_status().content)
    package = "harness_api_client"
    bin_dir = Path(sys.executable).parent
    result = subprocess.run(
        [
            str(bin_dir / "openapi-python-client"),
            "generate",
            "--path",
            str(schema),
            "--meta",
            "none",
            "--output-path",
            str(folder / package),
            "--fail-on-warning",
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"},  # its ruff post-hook
    )
    assert result.returncode == 0, result.stdout + result.stderr
    sys.path.insert(0, str(folder))
    return package


def test_a_generated_client_creates_a_rule_and_a_delayed_run(live_server, tmp_path):
    token = token_create(name="gen", user=make_user("olga", "Operators"), now=timezone.now())
    package = _generate(f"{live_server.url}/api/v1/schema/?format=json", tmp_path)
    try:
        client_mod = importlib.import_module(f"{package}.client")
        rules_create = importlib.import_module(f"{package}.api.rules.rules_create")
        schedule_once = importlib.import_module(f"{package}.api.runs.runs_schedule_once")
        models = importlib.import_module(f"{package}.models")
        with client_mod.AuthenticatedClient(base_url=live_server.url, token=token) as client:
            _use(client, models, rules_create, schedule_once)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
            del sys.modules[name]
    run = TaskRun.objects.get()
    assert run.rule == TriggerRule.objects.get(name="generated") and run.state == TaskRun.State.PENDING
    assert run.biz_key == f"rule/{run.rule_id}/once-key/gen%3A1"


def _use(client, models, rules_create, schedule_once) -> None:
    made = rules_create.sync_detailed(
        client=client,
        body=models.RuleCreateRequest(
            name="generated",
            reason="made by a generated client",
            kind=models.KindEnum.INTERVAL,
            interval_seconds=60,
            timezone="UTC",
            dedupe_key_template="{rule}:{slot}",
            skill="harness.noop",
        ),
    )
    assert made.status_code == 201, made.content
    assert isinstance(made.parsed, models.Rule) and made.parsed.version == 1

    body = models.ScheduleOnceRequest(idempotency_key="gen:1", rule="generated", delay_seconds=120)
    first = schedule_once.sync_detailed(client=client, body=body)
    assert first.status_code == 201 and first.parsed.created is True
    again = schedule_once.sync_detailed(client=client, body=body)
    assert again.status_code == 200 and again.parsed.created is False
    assert again.parsed.run.id == first.parsed.run.id

    refused = schedule_once.sync_detailed(
        client=client, body=models.ScheduleOnceRequest(idempotency_key="gen:2", rule="generated", delay_seconds=-1)
    )
    assert refused.status_code == 400 and isinstance(refused.parsed, models.Problem)
    assert refused.parsed.field == "delay_seconds"
