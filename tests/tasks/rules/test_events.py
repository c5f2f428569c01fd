"""Pure event decisions (signatures: test_signatures.py): freshness, payload mapping, key templates, file selection."""

from datetime import UTC, datetime, timedelta

import pytest

from tasks.rules import events, keys
from tasks.rules.events import FileEntry, Mapping, Refused

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
TS = str(int(NOW.timestamp()))


@pytest.mark.parametrize(
    ("offset", "code"),
    [
        (-301, "timestamp_too_old"),
        (-300, None),
        (0, None),
        (300, None),
        (301, "timestamp_too_new"),
        (-86400, "timestamp_too_old"),
    ],
)
def test_it_accepts_timestamps_within_five_minutes_either_way(offset, code):
    sent = events.parse_timestamp(str(int(NOW.timestamp()) + offset))
    if code is None:
        events.check_freshness(sent, now=NOW)
        return
    with pytest.raises(Refused) as exc:
        events.check_freshness(sent, now=NOW)
    assert exc.value.code == code and exc.value.status == 401


@pytest.mark.parametrize("value", ["", "12.5", "-5", "1e9", "abc", "\uff11\uff12\uff13", "999999999999", " 123"])
def test_it_refuses_a_timestamp_that_is_not_whole_unix_seconds(value):
    with pytest.raises(Refused) as exc:
        events.parse_timestamp(value)
    assert exc.value.code == "bad_timestamp"


@pytest.mark.parametrize("value", ["", "a b", "x" * 201, "id/1", "é", "ok\n"])
def test_it_refuses_a_bad_delivery_id(value):
    with pytest.raises(Refused) as exc:
        events.check_delivery_id(value)
    assert exc.value.code == "bad_delivery_id"


@pytest.mark.parametrize("body", [b"", b"not json", b"[1, 2]", b'"x"', b"\xff\xfe"])
def test_it_refuses_a_body_that_is_not_a_json_object(body):
    with pytest.raises(Refused) as exc:
        events.parse_body(body)
    assert exc.value.code == "malformed_json"


def test_it_maps_criteria_snapshot_and_references_and_drops_the_rest():
    payload = {
        "order": {"id": 42, "status": "paid", "total": 99.5, "customer": {"tier": "gold", "address": "secret"}},
        "event": "order.paid",
        "rev": 3,
        "doc_url": "https://docs.example/o/42",
        "document": {"big": "x" * 1000},
    }
    mapping = Mapping(
        object_id_path="order.id",
        action_path="event",
        version_path="rev",
        snapshot_fields=("order.total", "order.customer.tier", "order.coupon"),
        reference_fields=("doc_url",),
    )
    mapped = events.map_payload(payload, mapping)
    assert mapped.criteria == {"object_id": "42", "action": "order.paid", "version": "3"}
    assert mapped.snapshot == {"order.total": 99.5, "order.customer.tier": "gold", "order.coupon": None}
    assert mapped.refs == {"doc_url": "https://docs.example/o/42"}


@pytest.mark.parametrize(
    ("payload", "names"),
    [
        ({"action": "a", "version": 1}, "object_id"),
        ({"object_id": "", "action": "a", "version": 1}, "object_id"),
        ({"object_id": "1", "action": None, "version": 1}, "action"),
        ({"object_id": "1", "action": "a", "version": True}, "version"),
        ({"object_id": {"id": 1}, "action": "a", "version": 1}, "object_id"),
        ({"object_id": "x" * 201, "action": "a", "version": 1}, "object_id"),
    ],
)
def test_it_refuses_missing_or_unusable_criteria_naming_the_field(payload, names):
    with pytest.raises(Refused) as exc:
        events.map_payload(payload, Mapping())
    assert exc.value.code == "invalid_payload" and exc.value.status == 422
    assert names in exc.value.detail


def test_it_refuses_to_copy_a_whole_document_as_a_snapshot():
    payload = {"object_id": "1", "action": "a", "version": 1, "customer": {"name": "x"}}
    with pytest.raises(Refused) as exc:
        events.map_payload(payload, Mapping(snapshot_fields=("customer",)))
    assert "customer" in exc.value.detail and "scalar" in exc.value.detail


@pytest.mark.parametrize(
    ("template", "error"),
    [
        ("{rule}:{object_id}:{action}:{version}", None),
        ("{object_id}:{action}:{version}", None),
        ("{source}:{object_id}", None),
        ("{source}:{object_id}:{business_date}", "event key by date"),
        ("{object_id}:{previous_business_date}", "event key by date"),
        ("{object_id}{action}", "Separate {action}"),
        ("{rule}:{slot}", "no slot"),
        ("{rule}:{object_id}:{slot}", "no slot"),
        ("{rule}:{action}", "needs {object_id}"),
        ("{rule}:{object_id}:{nope}", "Unknown placeholder {nope}"),
    ],
)
def test_it_validates_event_key_templates(template, error):
    if error is None:
        events.validate_key_template(template, params={})
        return
    with pytest.raises(keys.KeyTemplateError, match=error.replace("{", r"\{").replace("}", r"\}")):
        events.validate_key_template(template, params={})


def test_it_renders_the_key_from_criteria_and_keeps_builtins():
    key = events.render_key(
        "{rule}:{source}:{object_id}:{action}:{version}",
        rule_id=7,
        rule="r",
        source="s",
        criteria={"object_id": "42", "action": "paid", "version": "3", "rule": "evil"},
        business_date="2026-12-01",
        params={"object_id": "param"},
    )
    assert key == "rule/7/event/r:s:42:paid:3"


def test_it_refuses_a_key_that_renders_too_long():
    with pytest.raises(Refused) as exc:
        events.render_key(
            "{object_id}:{action}",
            rule_id=7,
            rule="r",
            source="s",
            criteria={"object_id": "x" * 200, "action": "y" * 200, "version": "1"},
            business_date="2026-12-01",
            params={},
        )
    assert exc.value.code == "invalid_key"


def _e(name, *, age=60, size=10):
    return FileEntry(name=name, size=size, mtime=NOW - timedelta(seconds=age))


@pytest.mark.parametrize(
    "name",
    [
        "a.csv.tmp",
        "a.TMP",
        "a.part",
        "a.partial",
        ".a.csv",
        ".~lock.a.csv#",
        "~$a.xlsx",
        "a.csv~",
        "a.crdownload",
        "a.swp",
        "a.lock",
    ],
)
def test_it_never_takes_a_temp_name(name):
    assert events.is_temp_name(name)
    assert (
        events.select_ready_files([_e(name), _e(name + ".ready")], now=NOW, require_marker=False, settle=timedelta(0))
        == []
    )


def test_it_takes_settled_final_names_and_marked_files():
    entries = [
        _e("old.csv", age=60),
        _e("fresh.csv", age=1),  # still possibly being written in place
        _e("marked.csv", age=0),
        _e("marked.csv.ready", age=0),
        _e("orphan.csv.ready"),  # a marker without its data file yet
        _e("x.tmp"),
    ]
    chosen = events.select_ready_files(entries, now=NOW, require_marker=False, settle=timedelta(seconds=5))
    assert [e.name for e in chosen] == ["old.csv", "marked.csv"]
    chosen = events.select_ready_files(entries, now=NOW, require_marker=True, settle=timedelta(seconds=5))
    assert [e.name for e in chosen] == ["marked.csv"]


def test_it_gives_a_file_a_stable_identity_that_changes_with_its_content():
    entry = _e("a.csv")
    first = events.file_payload(entry, path="/in/a.csv")
    assert first == events.file_payload(entry, path="/in/a.csv")
    assert events.file_delivery_id(first) == events.file_delivery_id(events.file_payload(entry, path="/in/a.csv"))
    assert first["object_id"] == "a.csv" and first["action"] == "arrived"
    for changed in (_e("a.csv", size=11), _e("a.csv", age=59)):
        other = events.file_payload(changed, path="/in/a.csv")
        assert other["version"] != first["version"]
        assert events.file_delivery_id(other) != events.file_delivery_id(first)
