"""Agents and rules that use them: validation with clear messages, import/export by name, the
demo file, prompt rendering and the pure budget decision."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from runs.engine.calls import agent_budget_list
from tasks.agents.budgets import Spend, budget_decide, budget_window
from tasks.models import Agent, TriggerRule
from tasks.services import RuleImportError, rule_export, rule_import
from tasks.skills.llm_json import render_prompt
from tasks.skills.sdk import SkillError
from tests.support.processes import ROOT
from tests.support.rules import build_rule

DEMO = ROOT / "tasks" / "fixtures" / "demo_rules.json"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def rule(**over) -> TriggerRule:
    return build_rule("summaries", **{"skill": "llm_json", **over})


@pytest.mark.django_db
def test_it_requires_a_url_and_a_key_variable_name_for_http_agents():
    with pytest.raises(ValidationError) as info:
        Agent(name="a", provider="openai", model="m").full_clean()
    assert set(info.value.message_dict) == {"base_url", "api_key_env"}

    with pytest.raises(ValidationError) as info:
        Agent(
            name="a", provider="openai", model="m", base_url="https://x.example/v1", api_key_env="sk-abc123"
        ).full_clean()
    assert "NAME of an environment variable" in info.value.message_dict["api_key_env"][0]
    assert "sk-abc123" not in str(info.value)

    Agent(
        name="a", provider="openai", model="m", base_url="https://x.example/v1", api_key_env="HARNESS_SECRET_OPENAI"
    ).full_clean()
    Agent(name="e", provider="echo", model="echo").full_clean()


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["https://x.example/v1?key=abc", "https://user:pw@x.example/v1"])
def test_it_refuses_credentials_in_the_base_url(url):
    with pytest.raises(ValidationError) as info:
        Agent(name="a", provider="openai", model="m", base_url=url, api_key_env="HARNESS_SECRET_K").full_clean()
    assert "keys go in the environment variable" in info.value.message_dict["base_url"][0]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "objekt"}, "Not a valid JSON Schema"),
        ({"properties": {"a": {"minLength": -1}}}, "properties/a/minLength"),
        ([1, 2], "A JSON Schema object"),
    ],
)
def test_it_rejects_an_invalid_output_schema_naming_where(schema, message):
    agent = Agent.objects.create(name="e", provider="echo", model="echo")
    with pytest.raises(ValidationError) as info:
        rule(agent=agent, output_schema=schema).full_clean()
    assert message in info.value.message_dict["output_schema"][0]


@pytest.mark.django_db
def test_it_requires_an_agent_for_llm_json():
    with pytest.raises(ValidationError) as info:
        rule().full_clean()
    assert "choose the agent" in info.value.message_dict["agent"][0]
    rule(skill="harness.noop").full_clean()


@pytest.mark.django_db
def test_it_installs_the_demo_rules_with_an_echo_agent_and_again_idempotently():
    first = rule_import(DEMO.read_text())
    second = rule_import(DEMO.read_text())

    echo = Agent.objects.get(name="demo-echo")
    assert echo.provider == "echo" and echo.api_key_env == ""
    demo = TriggerRule.objects.get(name="demo-llm-summary")
    assert demo.agent == echo and demo.skill == "llm_json" and demo.output_schema["required"] == ["summary", "severity"]
    assert "demo-llm-summary" in first.created and "demo-llm-summary" in second.unchanged


@pytest.mark.django_db
def test_it_round_trips_agents_and_rule_agents_through_export():
    rule_import(DEMO.read_text())
    exported = rule_export()
    assert exported["agents"][0]["name"] == "demo-echo"
    assert next(r for r in exported["rules"] if r["name"] == "demo-llm-summary")["agent"] == "demo-echo"

    result = rule_import(json.dumps(exported))

    assert result.created == [] and result.updated == []
    assert rule_export() == exported


@pytest.mark.django_db
def test_it_rejects_a_rule_naming_an_unknown_agent_and_saves_nothing():
    doc = {
        "agents": [{"name": "fresh", "provider": "echo", "model": "echo"}],
        "rules": [
            {
                "name": "r1",
                "reason": "x",
                "kind": "interval",
                "interval_seconds": 60,
                "timezone": "UTC",
                "skill": "llm_json",
                "agent": "ghost",
            }
        ],
    }

    with pytest.raises(RuleImportError) as info:
        rule_import(json.dumps(doc))

    assert info.value.errors == ["rule 'r1' field agent: no agent named 'ghost' in the file or the database"]
    assert not Agent.objects.exists() and not TriggerRule.objects.exists()


@pytest.mark.django_db
def test_it_rejects_an_agent_with_a_key_in_the_file():
    doc = {
        "agents": [
            {
                "name": "leaky",
                "provider": "openai",
                "model": "m",
                "base_url": "https://x.example/v1",
                "api_key": "sk-123",
                "api_key_env": "HARNESS_SECRET_K",
            }
        ],
        "rules": [],
    }

    with pytest.raises(RuleImportError) as info:
        rule_import(json.dumps(doc))

    assert info.value.errors[0].startswith("agent 'leaky' field api_key: unknown field")


@pytest.mark.django_db
def test_it_offers_agent_and_schema_on_the_rule_form(admin_client):
    Agent.objects.create(name="e", provider="echo", model="echo")
    html = admin_client.get(reverse("admin:tasks_triggerrule_add")).content.decode()
    assert 'name="agent"' in html and 'name="output_schema"' in html and "e (echo)" in html


def test_it_renders_prompts_from_params():
    assert render_prompt("Sum {topic} for {day}; {{literal}}", {"topic": "sales", "day": {"d": 1}}) == (
        'Sum sales for {"d": 1}; {literal}'
    )
    with pytest.raises(SkillError) as info:
        render_prompt("Hello {who}", {"topic": 1})
    assert info.value.kind == "invalid_param" and "{who}" in str(info.value)


@pytest.mark.parametrize(
    ("max_calls", "max_tokens", "spend", "allowed"),
    [
        (None, None, Spend(10**6, 10**9), True),
        (5, None, Spend(4, 0), True),
        (5, None, Spend(5, 0), False),
        (None, 1000, Spend(1, 999), True),
        (None, 1000, Spend(1, 1000), False),
        (0, None, Spend(0, 0), False),
        (5, 1000, Spend(1, 2000), False),
    ],
)
def test_it_decides_whether_a_call_fits_the_budget(max_calls, max_tokens, spend, allowed):
    now = T0 + timedelta(minutes=17, seconds=3)
    decision = budget_decide(max_calls=max_calls, max_tokens=max_tokens, spend=spend, now=now)
    assert decision.allowed is allowed and decision.reset_at == T0 + timedelta(hours=1)
    assert bool(decision.reason) is not allowed


def test_it_uses_fixed_utc_hours_as_budget_windows():
    assert budget_window(T0) == (T0, T0 + timedelta(hours=1))
    assert budget_window(T0 - timedelta(microseconds=1)) == (T0 - timedelta(hours=1), T0)


@pytest.mark.django_db
def test_it_lists_spend_against_budget_per_agent():
    from runs.models import ExternalCall

    agent = Agent.objects.create(name="e", provider="echo", model="echo", max_calls_per_hour=3)
    for at, tokens in (
        (T0 + timedelta(minutes=5), 10),
        (T0 + timedelta(minutes=50), 5),
        (T0 - timedelta(minutes=1), 99),
    ):
        ExternalCall.objects.create(
            agent=agent,
            agent_name="e",
            provider="echo",
            endpoint="echo:",
            model="echo",
            input_sha256="0" * 64,
            prompt_tokens=tokens,
            completion_tokens=1,
            started_at=at,
        )

    [row] = agent_budget_list(now=T0 + timedelta(minutes=55))

    assert (row["calls"], row["tokens"], row["max_calls_per_hour"], row["exhausted"]) == (2, 17, 3, False)
    assert row["resets_at"] == T0 + timedelta(hours=1)


@pytest.mark.django_db
def test_it_refuses_a_key_variable_name_with_a_trailing_newline():
    # ENV_NAME used "$", which matches before a trailing newline.
    with pytest.raises(ValidationError) as info:
        Agent(
            name="a", provider="openai", model="m", base_url="https://x.example/v1", api_key_env="HARNESS_SECRET_K\n"
        ).full_clean()
    assert "NAME of an environment variable" in info.value.message_dict["api_key_env"][0]
