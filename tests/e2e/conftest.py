import pytest


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
