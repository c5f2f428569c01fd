"""Error classification and fingerprints: pure."""

import socket

import pytest

from tasks.skills.errors import MAX_ERROR_TEXT, classify, fingerprint
from tasks.skills.sdk import ErrorKind, SkillError


@pytest.mark.parametrize("kind", sorted(ErrorKind.ALL))
def test_it_keeps_the_kind_a_skill_error_names(kind):
    classified = classify(SkillError(kind, "boom"))
    assert classified.kind == kind
    assert classified.retryable is (kind in ErrorKind.RETRYABLE)


def test_it_refuses_a_skill_error_with_an_unknown_kind():
    with pytest.raises(ValueError, match="unknown error kind"):
        SkillError("flaky")


class ReadTimeout(TimeoutError):
    """A client library's own timeout (requests, httpx and socket.timeout all subclass TimeoutError)."""


@pytest.mark.parametrize("exc", [TimeoutError("read timed out"), ReadTimeout("timed out")])
def test_it_classifies_timeouts(exc):
    assert classify(exc).kind == ErrorKind.TIMEOUT


@pytest.mark.parametrize(
    "exc", [ConnectionError("down"), ConnectionRefusedError(111, "refused"), ConnectionResetError("reset")]
)
def test_it_classifies_connection_errors_as_dependency_unreachable(exc):
    assert classify(exc).kind == ErrorKind.DEPENDENCY_UNREACHABLE
    assert classify(exc).retryable


@pytest.mark.parametrize("exc", [RuntimeError("x"), ValueError("x"), KeyError("x"), ZeroDivisionError(), OSError("x")])
def test_it_classifies_anything_else_as_unclassified(exc):
    classified = classify(exc)
    assert classified.kind == ErrorKind.UNCLASSIFIED
    assert not classified.retryable


def test_it_keeps_the_exception_type_and_text_in_a_bounded_message():
    assert classify(ValueError("bad channel")).message == "ValueError: bad channel"
    assert len(classify(ValueError("x" * (MAX_ERROR_TEXT * 2))).message) == MAX_ERROR_TEXT


def test_it_gives_the_same_fingerprint_when_only_numbers_differ():
    a = classify(TimeoutError("timed out after 30s talking to 10.0.0.1:5432 (attempt 1)"))
    b = classify(TimeoutError("timed out after 45s talking to 10.0.0.7:6432 (attempt 2)"))
    assert a.digest == b.digest
    assert fingerprint("unclassified", RuntimeError("object at 0x7f3a2b")) == fingerprint(
        "unclassified", RuntimeError("object at 0xDEADBEEF")
    )


def test_it_gives_different_fingerprints_for_different_failures():
    base = fingerprint("timeout", TimeoutError("read timed out"))
    assert fingerprint("timeout", TimeoutError("connect timed out")) != base
    assert fingerprint("rate_limited", TimeoutError("read timed out")) != base
    assert fingerprint("timeout", socket.gaierror("read timed out")) != base


def test_it_computes_the_same_fingerprint_on_every_call():
    # Pinned: the digest groups dead letters across processes, restarts and releases, so it may not
    # depend on anything but the kind, the type and the folded text (not on hash(), id() or the run).
    # sha256("dependency_unreachable|ConnectionRefusedError|refused by #.#.#.#:#")[:12]
    exc = ConnectionRefusedError("refused by 127.0.0.1:6379")
    assert classify(exc).digest == "474d9ec6e75b"
    assert fingerprint(ErrorKind.DEPENDENCY_UNREACHABLE, ConnectionRefusedError("refused by 10.0.0.9:5432")) == (
        "474d9ec6e75b"
    )
    assert len(classify(exc).digest) <= 16  # fits Attempt.error_digest
