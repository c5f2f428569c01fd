"""Business keys: rendering and validating dedupe-key templates. Pure."""

import pytest

from tasks.rules import keys
from tasks.rules.keys import MAX_KEY_LENGTH, KeyTemplateError, placeholders, render, validate_template

SLOT = "2026-12-01T09:00:00+08:00"
DATE = "2026-12-01"


def render_key(template: str, **params) -> str:
    return render(template, rule="daily-report", slot=SLOT, business_date=DATE, params=params)


def test_it_renders_the_built_in_placeholders():
    assert render_key("{rule}:{slot}") == f"daily-report:{SLOT}"
    assert render_key("report:{business_date}") == f"report:{DATE}"


def test_it_renders_params():
    assert render_key("report:{business_date}:{channel}", channel="email") == f"report:{DATE}:email"
    assert render_key("{object_id}:{action}:{version}", object_id=42, action="sync", version=3) == "42:sync:3"


def test_it_does_not_let_params_override_the_built_ins():
    assert render_key("{rule}:{slot}:{business_date}", rule="x", slot="y", business_date="z") == (
        f"daily-report:{SLOT}:{DATE}"
    )


def test_it_gives_different_slots_different_keys():
    one = render("{rule}:{slot}", rule="r", slot="2026-12-01T09:00:00+08:00", business_date=DATE, params={})
    two = render("{rule}:{slot}", rule="r", slot="2026-12-01T10:00:00+08:00", business_date=DATE, params={})
    assert one != two


@pytest.mark.parametrize(
    ("template", "params"),
    [
        ("{rule}:{slot}", {}),
        ("{rule}:{business_date}", {}),
        ("report:{business_date}:{channel}", {"channel": "email"}),
        ("{object_id}", {"object_id": 1}),
    ],
)
def test_it_accepts_templates_made_of_known_placeholders(template, params):
    validate_template(template, params=params)


def test_it_names_an_unknown_placeholder():
    with pytest.raises(KeyTemplateError) as info:
        validate_template("report:{business_date}:{channel}", params={"region": "eu"})
    message = str(info.value)
    assert "{channel}" in message
    for allowed in ("{rule}", "{slot}", "{business_date}", "{region}"):
        assert allowed in message


@pytest.mark.parametrize(
    "template",
    ["{rule.upper}", "{rule.__class__}", "{slot[0]}", "{slot:>40}", "{business_date:%Y}", "{rule!r}", "{0}", "{}"],
)
def test_it_refuses_attribute_access_indexing_format_specs_and_conversions(template):
    with pytest.raises(KeyTemplateError, match="plain name"):
        validate_template(template, params={})


@pytest.mark.parametrize("template", ["daily-report", "", "   ", "{{rule}}"])
def test_it_refuses_a_template_without_placeholders(template):
    with pytest.raises(KeyTemplateError):
        validate_template(template, params={})


@pytest.mark.parametrize("template", ["{rule", "rule}", "{rule}:{"])
def test_it_refuses_malformed_braces(template):
    with pytest.raises(KeyTemplateError, match="Malformed"):
        placeholders(template)


def test_it_refuses_a_key_longer_than_the_limit():
    fill = "x" * (MAX_KEY_LENGTH - len("k:"))
    assert len(render_key("k:{channel}", channel=fill)) == MAX_KEY_LENGTH
    with pytest.raises(KeyTemplateError, match=str(MAX_KEY_LENGTH)):
        render_key("k:{channel}", channel=fill + "x")


@pytest.mark.parametrize("template", ["{rule.upper}", "{rule.__class__}", "{slot[0]}"])
def test_it_refuses_to_render_expressions_validation_would_refuse(template):
    # A rule saved without full_clean() (shell, fixtures, a migration) reaches render() unvalidated:
    # "{rule.upper}" would otherwise render a bound method's repr, a memory address that differs in
    # every worker process, so the same slot would get a new biz_key each time (invariant 1).
    with pytest.raises(KeyTemplateError):
        render_key(template)


# --- scoped and escaped keys ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "escaped"),
    [
        ("email", "email"),
        ("a:b", "a%3Ab"),
        ("a/b", "a%2Fb"),
        ("50%", "50%25"),
        ("x y+z", "x%20y%2Bz"),
        ("a\x00b", "a%00b"),
        ("café-2026_01.csv~", "café-2026_01.csv~"),  # letters, digits and - _ . ~ stay readable
        (42, "42"),
    ],
)
def test_it_percent_encodes_separators_and_percent_in_values(value, escaped):
    assert keys.escape(value) == escaped


def test_escaping_is_injective_over_a_sample_of_tricky_values():
    sample = ["", ":", "%", "%3A", "%253A", "a:b", "a%3Ab", "/", "%2F", " ", "+", "%20", "\x00", "%00", "a", "A"]
    assert len({keys.escape(v) for v in sample}) == len(sample)
    for a in sample:
        for b in sample:
            rendered = render("{x}:{y}", rule="r", slot=SLOT, business_date=DATE, params={"x": a, "y": b}, escaped=True)
            assert rendered.count(":") == 1  # a value can never add a separator


def test_built_ins_are_written_as_they_are_so_old_keys_still_match():
    assert render("{rule}:{slot}", rule="daily", slot=SLOT, business_date=DATE, params={}, escaped=True) == (
        f"daily:{SLOT}"
    )


def test_the_namespace_is_the_rule_id_and_the_kind():
    assert keys.scoped(7, keys.EVENT, "o:1") == "rule/7/event/o:1"
    assert keys.in_namespace("rule/7/event/o:1", 7)
    assert not keys.in_namespace("rule/7/event/o:1", 71)
    assert not keys.in_namespace("rule/71/event/o:1", 7)
    assert not keys.in_namespace("rule/7/event/o:1", None)  # a rule-less run may not take a rule's key
    assert keys.in_namespace("api:1", None)
    with pytest.raises(ValueError):
        keys.namespace(7, "nope")


def test_the_whole_key_with_its_namespace_is_limited():
    prefix = keys.namespace(7, keys.SLOT)
    assert len(keys.scoped(7, keys.SLOT, "x" * (MAX_KEY_LENGTH - len(prefix)))) == MAX_KEY_LENGTH
    with pytest.raises(KeyTemplateError, match=str(MAX_KEY_LENGTH)):
        keys.scoped(7, keys.SLOT, "x" * (MAX_KEY_LENGTH - len(prefix) + 1))


@pytest.mark.parametrize("template", ["{business_date}{channel}", "{rule}x{slot}", "a{rule}b{slot}"])
def test_it_refuses_placeholders_with_nothing_escaped_between_them(template):
    with pytest.raises(KeyTemplateError, match="Separate"):
        validate_template(template, params={"channel": "e"})


@pytest.mark.parametrize(
    ("old", "source", "trial", "new"),
    [
        ("nightly:2026-12-01", "scheduler", False, "rule/3/slot/nightly:2026-12-01"),
        ("nightly:2026-12-01", "manual", False, "rule/3/slot/nightly:2026-12-01"),
        ("trial:nightly:2026-12-01", "manual", True, "rule/3/trial/nightly:2026-12-01"),
        ("o:shipped:2", "event", False, "rule/3/event/o:shipped:2"),
        ("rule/3/slot/x", "scheduler", False, None),  # already upgraded
        ("x" * 250, "scheduler", False, None),  # would not fit: left alone
    ],
)
def test_the_upgrade_of_a_stored_key(old, source, trial, new):
    assert keys.legacy_upgrade(old, rule_id=3, source=source, is_trial=trial) == new
    if new:
        assert keys.legacy_downgrade(new, rule_id=3) == old


def test_a_percent_between_placeholders_is_no_separator():
    # Escaped values hold "%" (in their %HH sequences), so "{a}%{b}" could render ("x", "3A:") and
    # ("x:", "3A") as one key; the template is refused, as "{a}{b}" is.
    with pytest.raises(KeyTemplateError, match="Separate"):
        keys.check_separated("{a}%{b}")
    one = render("{a}%{b}", rule="r", slot=SLOT, business_date=DATE, params={"a": "x", "b": "3A:"}, escaped=True)
    two = render("{a}%{b}", rule="r", slot=SLOT, business_date=DATE, params={"a": "x:", "b": "3A"}, escaped=True)
    assert one == two  # why: the collision the check prevents
    keys.check_separated("{a}%:{b}")  # a real separator beside it is fine
