"""Pools: the global pool always exists, cannot be deleted, and limits are validated."""

import pytest
from django.core.exceptions import ValidationError

from tasks.management.commands.harness import DEMO_RULES
from tasks.models import GLOBAL_POOL, Agent, Pool, TriggerRule
from tasks.services import RuleImportError, rule_export, rule_import

pytestmark = pytest.mark.django_db


def test_the_global_pool_is_installed_and_cannot_be_deleted():
    pool = Pool.objects.get(name=GLOBAL_POOL)
    assert pool.max_concurrency is None
    with pytest.raises(ValidationError):
        pool.delete()
    assert Pool.objects.filter(name=GLOBAL_POOL).exists()


def test_a_key_template_may_use_only_what_a_run_carries():
    pool = Pool(name="p", reason="r", max_concurrency=1, key_template="{tenant_id}")
    with pytest.raises(ValidationError) as exc:
        pool.full_clean()
    assert "key_template" in exc.value.message_dict
    Pool(name="p", reason="r", max_concurrency=1, key_template="{object_key}:{source}").full_clean()


def test_a_rate_needs_its_period():
    with pytest.raises(ValidationError) as exc:
        Pool(name="p", reason="r", rate_count=10).full_clean()
    assert "rate_period_seconds" in exc.value.message_dict


def test_the_demo_file_imports_its_pools_and_who_draws_from_them_and_exports_them_again():
    rule_import(DEMO_RULES.read_text())

    assert Pool.objects.get(name="demo-reports").max_concurrency == 2
    assert [p.name for p in TriggerRule.objects.get(name="demo-daily-report").pools.all()] == ["demo-reports"]
    assert Agent.objects.get(name="demo-echo").pool.rate_count == 30
    doc = rule_export()
    assert {p["name"] for p in doc["pools"]} == {"demo-echo-provider", "demo-reports"}  # untouched global left out
    assert next(r for r in doc["rules"] if r["name"] == "demo-daily-report")["pools"] == ["demo-reports"]
    # The same file again changes nothing.
    again = rule_import(DEMO_RULES.read_text())
    assert again.created == [] and again.updated == []


def test_an_import_naming_an_unknown_pool_is_refused_whole_with_the_rule_and_field():
    doc = """{"rules": [{"name": "r", "reason": "x", "kind": "interval", "interval_seconds": 60,
               "timezone": "UTC", "skill": "harness.noop", "pools": ["nope"]}]}"""
    with pytest.raises(RuleImportError) as exc:
        rule_import(doc)
    assert exc.value.errors == ["rule 'r' field pools: no pool named 'nope' in the file or the database"]


@pytest.mark.django_db
def test_a_pool_value_no_field_can_take_is_a_rejected_file_not_a_traceback():
    doc = '{"pools": [{"name": "p", "reason": "r", "max_concurrency": 1e999}], "rules": []}'

    with pytest.raises(RuleImportError, match="pool 'p': cannot convert float infinity to integer"):
        rule_import(doc)
    assert not Pool.objects.filter(name="p").exists()
