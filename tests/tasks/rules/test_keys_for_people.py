"""Keys for people (tasks/rules/keys.py): the part of a key that differs, unescaped; the stored keys a
raw text may mean. Pure."""

import pytest

from tasks.rules import keys


@pytest.mark.parametrize(
    ("value"),
    ["callback:order-7", "订单:7", "50% off", "a/b?c=d&e", "tab\there", "%41", "🙂:1", "plain", ""],
)
def test_unescape_is_the_inverse_of_escape(value):
    assert keys.unescape(keys.escape(value)) == value


def test_unescape_leaves_what_it_cannot_decode_as_stored():
    assert keys.unescape("legacy%E8key") == "legacy%E8key"  # half a UTF-8 sequence
    assert keys.unescape("50%zz") == "50%zz"


@pytest.mark.parametrize(
    ("stored", "rule_name", "shown"),
    [
        ("rule/5/slot/demo-broken-export:2026-12-01T09:00:00Z", "demo-broken-export", "2026-12-01T09:00:00Z"),
        ("rule/5/slot/report:2026-12-01:wechat", "daily-report", "report:2026-12-01:wechat"),
        ("rule/5/once-key/callback%3Aorder-7", "daily-report", "callback:order-7"),
        ("rule/12/trial-key/订单%3A7", "", "订单:7"),
        ("skill/harness.noop/once-key/cb%3A7", "", "cb:7"),
        ("legacy-key:1", "legacy", "legacy-key:1"),  # no namespace, no separator after the name
        ("rule/5/slot/demo", "demo", "demo"),  # nothing left after the name: the rendered part
        ("rule/5/unknown-kind/x", "", "rule/5/unknown-kind/x"),
    ],
)
def test_a_list_shows_the_part_that_differs(stored, rule_name, shown):
    assert keys.differing_part(stored, rule_name=rule_name) == shown


def test_the_kind_of_a_key():
    assert keys.kind_of("rule/5/once-key/x") == keys.ONCE_KEY
    assert keys.kind_of("report:1") == ""


@pytest.mark.parametrize(
    ("raw", "candidates"),
    [
        ("callback:order-7", ["callback:order-7", "callback%3Aorder-7"]),
        ("  订单:7 ", ["订单:7", "订单%3A7"]),
        ("plain-key", ["plain-key"]),
        (
            "rule/5/once-key/callback:order-7",
            [
                "rule/5/once-key/callback:order-7",
                "rule%2F5%2Fonce-key%2Fcallback%3Aorder-7",
                "rule/5/once-key/callback%3Aorder-7",
            ],
        ),
        (
            "rule/5/once-key/callback%3Aorder-7",
            [
                "rule/5/once-key/callback%3Aorder-7",
                "rule%2F5%2Fonce-key%2Fcallback%253Aorder-7",
                "rule/5/once-key/callback%253Aorder-7",
            ],
        ),
        ("", []),
        ("   ", []),
    ],
)
def test_a_raw_text_stands_for_itself_and_its_escaped_forms(raw, candidates):
    assert keys.search_candidates(raw) == candidates


def test_a_raw_named_key_finds_exactly_the_key_it_was_stored_as():
    stored = keys.scoped(5, keys.ONCE_KEY, keys.escape("callback:order-7"))
    pasted = keys.namespace(5, keys.ONCE_KEY) + "callback:order-7"  # as the desk shows it
    assert stored in keys.search_candidates(pasted)
