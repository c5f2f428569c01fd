import pytest

from tests.support.servers import PrivatePostgres, PrivateRedis


@pytest.fixture(autouse=True)
def no_process_crashed(request):
    """A worker or beat that dies on its own loses in-flight work until leases expire; the test may
    still pass thanks to the sweeper and a second process, so look for it explicitly."""
    if "harness" not in request.fixturenames:
        yield
        return
    harness = request.getfixturevalue("harness")
    yield
    crashed = [p.name for p in harness.procs if "Unrecoverable error" in p.log()]
    assert not crashed, f"harness process(es) {crashed} died of an unrecoverable error; see the process logs"


@pytest.fixture
def servers(tmp_path):
    """The test's own PostgreSQL and Redis, for tests that restart or stop them."""
    pg, rd = PrivatePostgres(), PrivateRedis(tmp_path)
    pg.start()
    rd.start()
    yield pg, rd
    rd.stop()
    pg.stop()
