import shutil

import pytest
from django.conf import settings
from django.db import connections
from django.test.utils import setup_databases, teardown_databases
from django.utils import translation
from pytest_django.fixtures import _set_suffix_to_test_databases

from tests.support import test_databases
from tests.support.processes import Harness
from tests.support.receiver import start_receiver
from tests.support.settings import lane


def pytest_addoption(parser):
    parser.addoption(
        "--backend-only",
        action="store_true",
        help="run only the tests marked backend (every e2e and transactional test and those marked by hand)",
    )
    parser.addoption(
        "--skip-pure",
        action="store_true",
        help="leave out the pure tests (no database, no broker, no real process), which cannot differ "
        "between backends: the PostgreSQL + Redis pass of ./harness test",
    )
    parser.addoption(
        "--test-run",
        default="",
        help="the id both passes of one ./harness test share, so the second copies the template databases "
        "the first migrated (tests/support/test_databases.py); without it, this pytest run's own",
    )


def _is_pure(item) -> bool:
    """Touches neither the database nor the broker: a decision, a parser, a settings check."""
    if item.get_closest_marker("backend") or item.get_closest_marker("django_db"):
        return False
    return not {"db", "transactional_db", "live_server", "harness"} & set(getattr(item, "fixturenames", ()))


def _is_backend(item) -> bool:
    """Where the database or broker matters: real processes, real commits and races between connections."""
    if item.get_closest_marker("backend") or item.get_closest_marker("e2e"):
        return True
    if {"transactional_db", "live_server", "harness"} & set(getattr(item, "fixturenames", ())):
        return True
    db = item.get_closest_marker("django_db")
    return bool(db and (db.kwargs.get("transaction") or (db.args and db.args[0])))


# Within each of pytest-django's groups (below), run first and in this order the tests that take
# longest (--durations), so that under pytest-xdist they start early on different workers and the
# short tests fill in around them; then every other e2e test.
LONGEST_FIRST = (
    # End-to-end tests, longest first as `.ci/run` printed them on 2026-12-05 (both passes merged).
    "tests/e2e/test_spread_e2e.py::",
    "tests/e2e/test_pool_child_kills_e2e.py::",
    "tests/e2e/test_agent_faults_e2e.py::test_a_postgres_restart",
    "tests/e2e/test_objectives_e2e.py::test_a_run_no_worker_consumes",
    "tests/e2e/test_incident_browser.py::",
    "tests/e2e/test_catchup_e2e.py::",
    "tests/e2e/test_outage_incidents_e2e.py::",
    "tests/e2e/test_restarts_e2e.py::",
    "tests/e2e/test_rolling_upgrade_e2e.py::",
    "tests/e2e/test_objectives_e2e.py::test_an_overrunning_run",
    "tests/e2e/test_agent_faults_e2e.py::",
    "tests/e2e/test_plan_e2e.py::",
    "tests/e2e/test_plan_change_e2e.py::",
    "tests/e2e/test_worker_faults_e2e.py::test_runs_held_by_a_killed_worker",
    "tests/e2e/test_backlog_e2e.py::",
    "tests/e2e/test_healthz_restarts_e2e.py::test_healthz_fails_only_while_redis_is_down",
    "tests/e2e/test_banner_browser.py::",
    "tests/e2e/test_worker_faults_e2e.py::test_healthz_reports_a_frozen_worker",
    "tests/e2e/test_rerun_browser.py::",
    "tests/e2e/test_schedule_e2e.py::test_two_beats_and_two_workers",
    "tests/e2e/test_flow_e2e.py::test_a_rate_pool",
    "tests/e2e/test_upgrade_n1_e2e.py::",
    "tests/e2e/test_objectives_e2e.py::",
    "tests/deadletters/test_alerts_e2e.py::test_a_receiver_that_was_down",
    # Tests without real processes that take seconds: first in their lane.
    "tests/api/test_schemathesis.py::test_schemathesis_finds_no_5xx",
    "tests/runs/test_status.py::test_the_status_page_is_a_fixed_number_of_queries_for_a_thousand_rules",
    "tests/runs/test_incident_page.py::test_the_page_and_its_grid_are_a_fixed_number_of_queries",
    "tests/runs/test_status_plan.py::test_every_per_rule_probe",
    "tests/runs/test_dashboard.py::test_it_renders_the_dashboard_within_a_fixed_number_of_queries_on_20k_runs",
    "tests/runs/test_metrics.py::test_a_scrape_of_many_runs_is_the_same_queries_and_prints_its_time",
    "tests/tasks/test_secrets_surface.py::",
    "tests/site/test_migration_lint.py::",
    "tests/tasks/triggers/test_scheduler.py::test_every_slot_ends_in_exactly_one_run_or_decision[gap2-",
    "tests/deadletters/test_alerts.py::test_a_storm_of_500",
    "tests/runs/test_races.py::",
    # Then the other end-to-end tests that take longest.
    "tests/e2e/test_failures_e2e.py::",
    "tests/e2e/test_flow_e2e.py::",
    "tests/e2e/test_object_lease_e2e.py::",
    "tests/e2e/test_steps_e2e.py::",
    "tests/e2e/test_guards_e2e.py::",
    "tests/e2e/test_worker_faults_e2e.py::",
)


def _django_group(item) -> int:
    """pytest-django's order (Django's): 0 database tests, 1 transactional ones, 2 the rest.

    It must hold on every xdist worker: a transactional test flushes the worker's database when
    it ends, taking the rows the data migrations installed (groups, beat entries, the default alert
    channel) that the later plain database tests rely on."""
    fixtures = set(getattr(item, "fixturenames", ()))
    db = item.get_closest_marker("django_db")
    transactional = bool(db and (db.kwargs.get("transaction") or db.kwargs.get("reset_sequences") or db.args))
    if transactional or {"transactional_db", "live_server"} & fixtures:
        return 1
    return 0 if db or "db" in fixtures else 2


def _run_order(item) -> tuple[int, int]:
    for rank, prefix in enumerate(LONGEST_FIRST):
        if item.nodeid.startswith(prefix):
            return _django_group(item), rank
    return _django_group(item), len(LONGEST_FIRST) + (0 if item.get_closest_marker("e2e") else 1)


def pytest_collection_modifyitems(config, items):
    vendor = connections["default"].vendor
    for item in items:
        if _is_backend(item) and not item.get_closest_marker("backend"):
            item.add_marker(pytest.mark.backend)
        one_pass = item.get_closest_marker("one_pass")
        if one_pass is not None and one_pass.args[0] != vendor:
            reason = f"its subject does not depend on the database: run in the {one_pass.args[0]} pass"
            item.add_marker(pytest.mark.skip(reason=reason))
    # Stable: otherwise the order pytest-django gave (itself stable: collection order within a group).
    items.sort(key=_run_order)
    if config.getoption("backend_only"):
        _deselect(config, items, lambda item: not item.get_closest_marker("backend"))
    if config.getoption("skip_pure"):
        _deselect(config, items, _is_pure)


def _deselect(config, items, leave_out) -> None:
    keep, deselected = [], []
    for item in items:
        (deselected if leave_out(item) else keep).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = keep


def pytest_report_header(config):
    return [
        f"harness database: {settings.DATABASES['default']['ENGINE']}",
        f"harness broker: {settings.CELERY_BROKER_URL}",
    ]


@pytest.fixture(scope="session")
def django_db_modify_db_settings_tox_suffix() -> None:
    """In place of pytest-django's suffix for tox environments (unused here): the lane's, so that the two
    sessions of one backend that `./harness test` runs at once never share a test database
    (tests/support/settings.py). The xdist worker's suffix follows it: test_test_e2e_gw0."""
    if lane():
        _set_suffix_to_test_databases(suffix=lane())


@pytest.fixture(scope="session")
def django_db_setup(request, django_test_environment, django_db_blocker, django_db_modify_db_settings):
    """pytest-django's, except that an xdist worker copies a template migrated once per run instead
    of migrating its own database (tests/support/test_databases.py). Always a fresh database:
    pytest-django's --reuse-db and --no-migrations are not used by this suite."""
    worker = getattr(request.config, "workerinput", {}).get("workerid")
    verbosity = request.config.option.verbose
    with django_db_blocker.unblock():
        if worker:
            conn = connections["default"]
            old_name, own_name = conn.settings_dict["NAME"], conn.settings_dict["TEST"]["NAME"]
            # Every lane copies the one template of the run: the first to get there migrates it.
            suffix = "_".join(filter(None, (lane(), worker)))
            test_databases.worker_database_create(
                base_name=own_name.removesuffix(f"_{suffix}"),
                own_name=own_name,
                run_key=test_databases.run_key(request.config),
                verbosity=verbosity,
            )
            db_cfg = [(conn, old_name, True)]
        else:
            db_cfg = setup_databases(verbosity=verbosity, interactive=False, aliases={"default"})
    yield
    with django_db_blocker.unblock():
        teardown_databases(db_cfg, verbosity=verbosity)


@pytest.fixture(autouse=True)
def _default_language():
    """Each test starts in the default language: a test client request with Accept-Language
    zh-hans leaves it active in the thread (LocaleMiddleware does not reset it), and a later test
    reading a message outside a request would get it in Chinese."""
    yield
    translation.deactivate()


@pytest.fixture(autouse=True)
def _pressure_measurements_forgotten():
    """Backpressure measurements are cached per process for a second of `now`; tests reuse instants."""
    from runs.engine.backpressure import pressure_cache_clear

    pressure_cache_clear()
    yield
    pressure_cache_clear()


@pytest.fixture
def purged_broker():
    """An empty broker, so no message from an earlier test reaches this test's workers. On the file
    broker that includes the claims: a consumer killed in an earlier test left the messages it held
    there, and the next consumer to start would put them back in the queue (CI saw a worker run one)."""
    from harness_site.celery import app

    if settings.CELERY_BROKER_URL.startswith("filesystem://"):
        for sub in ("queue", "processed", "claims", "control"):
            folder = settings.BROKER_DIR / sub
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True, exist_ok=True)
    else:
        with app.connection_for_write() as conn:
            conn.default_channel.client.flushdb()
    yield


@pytest.fixture
def receiver():
    """A webhook receiver on loopback (tests/support/receiver.py), stopped after the test."""
    rec, server = start_receiver()
    yield rec
    server.shutdown()
    server.server_close()


@pytest.fixture
def beat_entries(transactional_db):
    """The beat entries the data migration installs; transactional tests flush them, so re-create."""
    from django.apps import apps as django_apps

    from runs.beat import beat_entries_install

    beat_entries_install(django_apps)


@pytest.fixture
def harness(transactional_db, purged_broker, beat_entries, tmp_path):
    """Start real worker/beat processes with harness.worker(...)/harness.beat(...); all stopped after."""
    h = Harness(tmp_path)
    yield h
    h.stop_all()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    h = item.funcargs.get("harness") if hasattr(item, "funcargs") else None
    if report.failed and isinstance(h, Harness):
        report.sections.append(("harness process logs", h.logs()))
