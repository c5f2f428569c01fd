"""The API tests' superuser client; clients per role are made in the tests (tests/support/api.py)."""

import pytest

from tests.support.api import api_for
from tests.support.desk import make_user


@pytest.fixture
def admin_api(db):
    return api_for(make_user("root", superuser=True))
