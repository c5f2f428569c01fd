"""Every malformed import file ends in "rules rejected" with a
reason and nothing saved, through the service and through `manage.py harness rules import`, on
SQLite and PostgreSQL. Wrong types at every level, non-object entries, bad unicode, huge numbers,
NUL bytes and deep nesting."""

import io
import json

import pytest
from django.core.management import CommandError, call_command

from tasks.agent_io import AGENT_FIELDS
from tasks.models import Agent, TriggerRule
from tasks.services import EXPORT_FIELDS, RuleImportError, rule_import

pytestmark = pytest.mark.django_db

RULE = {
    "name": "fuzz",
    "reason": "fuzzing",
    "kind": "cron",
    "cron": "0 9 * * *",
    "timezone": "Europe/Berlin",
    "dedupe_key_template": "{rule}:{business_date}",
    "skill": "harness.noop",
}
AGENT = {"name": "echo", "provider": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1"}
HOSTILE_VALUES = [
    None,
    True,
    0,
    -1,
    10**20,
    10**400,
    1.5,
    -1e308,
    "",
    "x",
    "\u0000",
    "a\u0000b",
    "9999-12-31T23:59:59-12:00",
    "0001-01-01T00:00:00+14:00",
    "\ud800",
    "x" * 100_000,
    [],
    [None],
    [1, "a", {}],
    [[[]]],
    {},
    {"a": {"b": [1]}},
    {"\u0000": 1},
]
DOCUMENTS = [
    b"",
    b"\xff\xfe\x00{",
    b'{"rules": [{"name": "caf\xe9"}]}',  # Latin-1, not UTF-8
    b"\x00",
    b"null",
    b"5",
    b'"rules"',
    b"[5]",
    b"[null]",
    b'{"rules": 5}',
    b'{"rules": {"name": "x"}}',
    b'{"rules": [5, "x", null, []]}',
    b'{"rules": [], "agents": 5}',
    b'{"rules": [], "agents": [5]}',
    b'{"rules": [], "agents": {"name": "x"}}',
    b'{"rules": [{"name": "a"}], "agents": [{"name": []}]}',
    b'{"rules": [{"' + b"[" * 50 + b'": 1}]}',
    b"[" * 100_000 + b"]" * 100_000,
    b'{"rules": [{"params": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5000 + b"}]}",
    b'{"rules": [{"max_attempts": 1' + b"0" * 5000 + b"}]}",
    b'{"rules": [{"max_attempts": NaN}]}',
    b'{"rules": [{"jitter_max": Infinity}]}',
    b'{"rules": [{"jitter_max": 1e999}]}',
    b'{"rules": [{"name": "x\\u0000"}]}',
    b'{"rules": [{"name": "\\ud800"}]}',
]


def _rejected(text) -> RuleImportError:
    """The import is refused with a reason (never another exception), and nothing is saved."""
    with pytest.raises(RuleImportError) as info:
        rule_import(text)
    assert info.value.errors and all(isinstance(e, str) and e for e in info.value.errors)
    assert not TriggerRule.objects.exists()
    assert not Agent.objects.exists()
    return info.value


@pytest.mark.parametrize("doc", DOCUMENTS, ids=range(len(DOCUMENTS)))
def test_a_malformed_document_is_rejected_with_a_reason(doc, tmp_path):
    text = doc.decode("utf-8", errors="surrogateescape")
    _rejected(text)
    path = tmp_path / "rules.json"
    path.write_bytes(doc)
    with pytest.raises(CommandError, match="rules rejected"):
        call_command("harness", "rules", "import", str(path), stdout=io.StringIO())


@pytest.mark.parametrize("field", [*EXPORT_FIELDS, "unknown_field"])
def test_a_hostile_value_in_any_rule_field_is_rejected_or_saved_never_a_traceback(field):
    for value in HOSTILE_VALUES:
        doc = json.dumps({"rules": [{**RULE, field: value}]})
        try:
            rule_import(doc)
        except RuleImportError as exc:
            assert exc.errors
            assert not TriggerRule.objects.exists(), (field, value)
        else:  # accepted: it must really be stored, and readable back
            assert [r.name for r in TriggerRule.objects.all()], (field, value)  # every column loads back
            TriggerRule.objects.all().delete()


@pytest.mark.parametrize("field", [*AGENT_FIELDS, "unknown_field"])
def test_a_hostile_value_in_any_agent_field_is_rejected_or_saved_never_a_traceback(field):
    for value in HOSTILE_VALUES:
        doc = json.dumps({"agents": [{**AGENT, field: value}], "rules": [{**RULE, "name": "with-agent"}]})
        try:
            rule_import(doc)
        except RuleImportError as exc:
            assert exc.errors
            assert not Agent.objects.exists(), (field, value)
        else:
            TriggerRule.objects.all().delete()
            Agent.objects.all().delete()


def test_a_non_utf8_file_from_stdin_is_rejected(monkeypatch):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b'{"rules": [{"name": "caf\xe9"}]}')))
    with pytest.raises(CommandError, match="rules rejected"):
        call_command("harness", "rules", "import", "-", stdout=io.StringIO())
