"""The worker's per-task connection handling (harness_site/celery.py): CONN_MAX_AGE and broken
connections are still honoured around every task, but a connection that ended the previous task
cleanly a moment ago is not health-checked again (a SELECT 1 round trip per task of milliseconds)."""

import pytest
from django.db import connection

from harness_site import celery

pytestmark = pytest.mark.django_db


def health_checked_before_next_query() -> bool:
    return connection.health_check_enabled and not connection.health_check_done


def test_a_task_right_after_a_clean_one_skips_the_health_check(monkeypatch):
    connection.ensure_connection()
    celery._connections_after()
    celery._connections_before()
    assert not health_checked_before_next_query()


def test_a_task_after_an_idle_second_checks_its_connection_first(monkeypatch):
    connection.ensure_connection()
    celery._connections_after()
    monkeypatch.setattr(celery, "_connections_ok_at", [celery._connections_ok_at[0] - celery.HEALTH_CHECK_AFTER_IDLE])
    celery._connections_before()
    assert health_checked_before_next_query() == connection.settings_dict["CONN_HEALTH_CHECKS"]


def test_a_connection_that_had_an_error_is_checked_whatever_the_time(monkeypatch):
    connection.ensure_connection()
    celery._connections_after()
    connection.errors_occurred = True
    try:
        celery._connections_before()
        assert health_checked_before_next_query() == connection.settings_dict["CONN_HEALTH_CHECKS"]
    finally:
        connection.errors_occurred = False
