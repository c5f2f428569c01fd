"""Business keys: rendering and validating dedupe-key templates. Pure."""

import pytest

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
