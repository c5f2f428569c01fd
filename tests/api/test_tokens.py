"""One reader of `Authorization: Bearer <token>` (harness_site/api/tokens.py) for every API surface."""

from pathlib import Path

import pytest
from django.conf import settings
from django.test import RequestFactory
from rest_framework import exceptions

from harness_site.api.tokens import MALFORMED, UNKNOWN, bearer_credential, secret_matches

ROOT = Path(settings.BASE_DIR)


def credential(header: str | None):
    request = RequestFactory().get("/", **({"HTTP_AUTHORIZATION": header} if header is not None else {}))
    return bearer_credential(request)


@pytest.mark.parametrize(
    ("header", "token"), [(None, None), ("", None), ("Bearer abc", "abc"), ("bearer  abc ", "abc"), ("BEARER x", "x")]
)
def test_it_reads_a_bearer_token_or_none(header, token):
    assert credential(header) == token


@pytest.mark.parametrize(
    ("header", "detail"),
    [
        ("Basic abc", MALFORMED),
        ("Bearer", MALFORMED),
        ("Bearer   ", MALFORMED),
        ("Bearer a b", MALFORMED),
        ("Token abc", MALFORMED),
        ("Bearer a\x00b", UNKNOWN),
        ("Bearer " + "x" * 201, UNKNOWN),
    ],
)
def test_it_refuses_any_other_shape_of_the_header(header, detail):
    with pytest.raises(exceptions.AuthenticationFailed) as refused:
        credential(header)
    assert refused.value.detail == detail


def test_a_shared_secret_is_compared_whole():
    assert secret_matches("metrics-secret-0123456789", "metrics-secret-0123456789")
    assert not secret_matches("metrics-secret", "metrics-secret-0123456789")
    assert not secret_matches("", "metrics-secret-0123456789")


def test_no_other_module_reads_the_authorization_header():
    readers = [
        path.relative_to(ROOT).as_posix()
        for app in ("tasks", "runs", "deadletters", "harness_site")
        for path in (ROOT / app).rglob("*.py")
        if 'headers.get("Authorization"' in path.read_text() or "HTTP_AUTHORIZATION" in path.read_text()
    ]
    assert readers == ["harness_site/api/tokens.py"]
