"""PostgreSQL for the test process, flushed by DELETE instead of TRUNCATE.

Every transactional and end-to-end test ends with Django's flush of every table. On PostgreSQL that
is one TRUNCATE of 53 tables: about 1 s each time (new files for every table and index), against
0.05 s for deleting the few rows a test leaves; some 250 tests flush per pass. Django makes every
foreign key DEFERRABLE INITIALLY DEFERRED, so the deletes may run in any order inside flush's
transaction. The content types and permissions stay: the flush's post_migrate would only insert
them again (0.2-0.4 s more). Only the test process uses this engine; the worker and beat processes
a test starts run the real settings (tests/support/processes.py)."""

from django.db.backends.postgresql import base, operations


class DatabaseOperations(operations.DatabaseOperations):
    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if not tables or reset_sequences or allow_cascade:
            return super().sql_flush(style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        kept = {"django_content_type", "auth_permission"}
        deletes = [f"DELETE FROM {self.quote_name(table)};" for table in tables if table not in kept]
        return ["SET CONSTRAINTS ALL DEFERRED;", *deletes]


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
