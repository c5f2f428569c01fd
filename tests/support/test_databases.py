"""Each pytest-xdist worker's test database: a copy of one migrated once per `./harness test`.

Migrating is most of a worker's first test (30 s on PostgreSQL with six workers migrating at once
on two cores). So the first worker of a backend to get here migrates a template database under a
file lock, and every worker copies it: PostgreSQL's CREATE DATABASE ... TEMPLATE, a file copy on
SQLite. The template holds what the data migrations install (groups, beat entries, the default
alert channel) and is never used by a test, so the end-to-end phase copies the one the first phase
made: it is rebuilt when --test-run (given by ./harness test) or, without it, the pytest run
differs, so a changed migration is never served from an old template.
"""

import fcntl
import shutil
from pathlib import Path

from django.conf import settings
from django.db import connections

ROOT = Path(__file__).resolve().parents[2]


def template_name(test_name: str) -> str:
    """The template's name beside the worker databases: test_test_gw0 -> test_test_template;
    var/test.sqlite3_gw1 -> var/test.sqlite3_template."""
    return f"{test_name}_template"


def worker_database_create(*, base_name: str, own_name: str, run_key: str, verbosity: int = 0) -> None:
    """Make `own_name` (this worker's test database) a fresh copy of the run's migrated template.
    The connection is left on `own_name`, as Django's create_test_db leaves it."""
    conn = connections["default"]
    template = template_name(base_name)
    lock_path = ROOT / "var" / f".{Path(template).name}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one worker migrates; the others wait, then copy
        lock.seek(0)
        if lock.read().strip() != run_key:
            conn.settings_dict["TEST"]["NAME"] = template
            conn.creation.create_test_db(verbosity=verbosity, autoclobber=True, serialize=False)
            conn.close()  # PostgreSQL copies a template only while nobody is connected to it
            lock.seek(0)
            lock.truncate()
            lock.write(run_key)
            lock.flush()
        _copy(conn, template, own_name)
    conn.settings_dict["TEST"]["NAME"] = own_name
    conn.settings_dict["NAME"] = own_name
    settings.DATABASES["default"]["NAME"] = own_name


def _copy(conn, template: str, own_name: str) -> None:
    if conn.vendor == "sqlite":
        for suffix in ("", "-wal", "-shm"):
            Path(own_name + suffix).unlink(missing_ok=True)
        shutil.copyfile(template, own_name)
        return
    quote = conn.ops.quote_name
    with conn._nodb_cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {quote(own_name)}")
        cursor.execute(f"CREATE DATABASE {quote(own_name)} TEMPLATE {quote(template)}")


def run_key(config) -> str:
    return config.getoption("test_run") or config.workerinput["testrunuid"]
