"""The rule's field lists come from the model: every column is either carried by an export file (and
the REST API) or named as the harness's own record, and an imported field's JSON type, null and
time-of-day handling follow the column."""

from django.db import models

from tasks.models import TriggerRule
from tasks.services import (
    EXPORT_FIELDS,
    IMPORT_TYPES,
    NULLABLE_IMPORT_FIELDS,
    STATE_FIELDS,
    TIME_FIELDS,
    UNTYPED_IMPORT_FIELDS,
)


def test_every_column_of_a_rule_is_exported_or_is_the_harness_s_own_record():
    columns = {f.name for f in TriggerRule._meta.get_fields() if f.concrete or f.many_to_many}

    assert set(EXPORT_FIELDS) | set(STATE_FIELDS) == columns
    assert set(EXPORT_FIELDS) & set(STATE_FIELDS) == set()
    assert len(EXPORT_FIELDS) == len(set(EXPORT_FIELDS))


def test_an_imported_field_s_type_follows_its_column():
    assert IMPORT_TYPES["enabled"] is bool
    assert IMPORT_TYPES["max_attempts"] is int
    assert IMPORT_TYPES["jitter_min"] == (int, float)
    assert IMPORT_TYPES["params"] is dict
    assert IMPORT_TYPES["depends_on"] is list
    assert IMPORT_TYPES["pools"] is list
    assert IMPORT_TYPES["run_at"] is str and IMPORT_TYPES["hours_start"] is str and IMPORT_TYPES["kind"] is str
    assert set(IMPORT_TYPES) == set(EXPORT_FIELDS) - set(UNTYPED_IMPORT_FIELDS)


def test_null_and_times_of_day_follow_the_columns():
    meta = TriggerRule._meta

    assert NULLABLE_IMPORT_FIELDS == {f for f in EXPORT_FIELDS if meta.get_field(f).null} | {"pools"}
    assert {"interval_seconds", "run_at", "identity", "objective_time"} <= NULLABLE_IMPORT_FIELDS
    assert "name" not in NULLABLE_IMPORT_FIELDS
    assert set(TIME_FIELDS) == {f.name for f in meta.get_fields() if isinstance(f, models.TimeField)}
