"""A real client nobody here wrote: Schemathesis reads the served OpenAPI schema and fuzzes every
operation against a live server (Django's, in a thread): no response may be a 5xx, and every
response must conform to the schema (status code, content type, headers, body), data outside
the schema must be refused with a 4xx, and every 4xx is problem details (schemathesis_hooks.py).
Then Hypothesis, in-process, over every API path, method and input the schema cannot describe:
ids and counts in non-ASCII digits, any text in the path, bodies of any JSON or bytes, oversized
bodies and lying Content-Length headers: never a 5xx, and every 4xx a problem document.
Bounded for CI on 2 cores: a few Schemathesis examples per operation, one worker, 300 Hypothesis
examples, derandomized; under a minute together."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote, urlencode

import hypothesis
import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone
from hypothesis import strategies as st

from deadletters.models import DeadLetter
from harness_site.api.tokens import token_create
from tests.support.desk import daily_report, make_failed_run, make_user

pytestmark = [pytest.mark.backend]

CHECKS = ",".join(
    (
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_headers_conformance",
        "response_schema_conformance",
        "negative_data_rejection",
        "problem_details_on_every_error",  # tests/api/schemathesis_hooks.py
    )
)
HOOKS = Path(__file__).with_name("schemathesis_hooks.py")
MAX_EXAMPLES = 5


def test_schemathesis_finds_no_5xx_and_no_response_outside_the_schema(live_server, tmp_path):
    rule = daily_report()
    make_failed_run(rule=rule)
    token = token_create(name="fuzz", user=make_user("root", superuser=True), now=timezone.now())
    assert DeadLetter.objects.exists()
    started = time.monotonic()
    result = subprocess.run(
        [
            str(Path(sys.executable).with_name("schemathesis")),
            "run",
            f"{live_server.url}/api/v1/schema/?format=json",
            "--header",
            f"Authorization: Bearer {token}",
            "--checks",
            CHECKS,
            "--max-examples",
            str(MAX_EXAMPLES),
            "--workers",
            "1",
            "--phases",
            "examples,fuzzing",
            "--generation-database",
            "none",
            "--seed",
            "13",
            "--request-timeout",
            "20",
            "--report",
            "ndjson",
            "--report-dir",
            str(tmp_path),
            "--no-color",
        ],
        cwd=tmp_path,
        env={**os.environ, "SCHEMATHESIS_HOOKS": str(HOOKS)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    elapsed = time.monotonic() - started
    print(f"schemathesis: {elapsed:.1f} s\n{result.stdout[-3000:]}")
    assert result.returncode == 0, result.stdout[-20000:] + result.stderr[-3000:]
    found = re.search(r"(\d+) generated, (\d+) passed", result.stdout)
    assert found and int(found[1]) > 0 and found[1] == found[2], result.stdout[-3000:]
    assert re.search(r"Tested: (\d+)", result.stdout)[1] == re.search(r"Selected: \d+/(\d+)", result.stdout)[1]


# --- Hypothesis, in-process: what the schema cannot describe ------------------------------------

# Every API route, with {} where a path parameter goes; the flags and ping API, /metrics and webhooks too.
ROUTES = [
    "/api/v1/rules",
    "/api/v1/rules/{}",
    "/api/v1/rules/{}/pause",
    "/api/v1/rules/{}/resume",
    "/api/v1/rules/{}/run-now",
    "/api/v1/rules/{}/trial",
    "/api/v1/rules/{}/explain",
    "/api/v1/rules/{}/preview",
    "/api/v1/runs",
    "/api/v1/runs/{}",
    "/api/v1/runs/{}/retry",
    "/api/v1/runs/{}/cancel",
    "/api/v1/deadletters",
    "/api/v1/deadletters/{}",
    "/api/v1/deadletters/{}/replay",
    "/api/v1/deadletters/{}/close",
    "/api/v1/deadletters/{}/assign",
    "/api/flags",
    "/api/flags/set",
    "/api/flags/clear",
    "/api/rules/{}/ping",
    "/api/{}",
    "/metrics",
    "/hooks/{}/",
    "/hooks/{}",
]
# Digits that str.isdigit() takes and ASCII does not: full-width, Arabic-Indic, superscript, mathematical.
UNICODE_DIGITS = [
    *(chr(0xFF10 + d) for d in range(10)),
    *(chr(0x0660 + d) for d in range(10)),
    *("\u00b9", "\u00b2", "\u00b3", "\U0001d7cf"),
]
# Path text: ids in any digits, names with any characters a URL can carry (no "/", "?" or "#").
PATH_TEXT = st.one_of(
    st.sampled_from(["1", "daily-report", "0", "99999999999999999999", "-1", "1.0", " 1", *UNICODE_DIGITS]),
    st.text(st.sampled_from([*UNICODE_DIGITS, *"0123456789"]), min_size=1, max_size=20),
    st.text(st.characters(exclude_characters="/?#%", exclude_categories=("Cs",)), min_size=1, max_size=40),
)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=("Cs",)), max_size=30)
    | st.sampled_from(UNICODE_DIGITS),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=15), inner, max_size=5),
    max_leaves=12,
)
FIELDS = [
    "name",
    "scope",
    "note",
    "reason",
    "idempotency_key",
    "skill",
    "rule",
    "delay_seconds",
    "run_at",
    "timezone",
    "params",
    "slot",
    "biz_key",
    "owner",
    "kind",
    "cron",
    "enabled",
    "count",
    "limit",
]
BODIES = st.one_of(
    st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=6).map(lambda d: json.dumps(d).encode()),
    JSON.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=64),
    st.sampled_from([b"", b"{", b'{"a": NaN}', b"[" * 3000, b'{"a": "\\u0000"}', b"\xff\xfe{}"]),
    # Over the limit, sent whole: refused by its Content-Length before it is read.
    st.integers(256 * 1024, 3 * 1024 * 1024).map(lambda n: b'{"note": "' + b"x" * n + b'"}'),
)
CONTENT_LENGTHS = st.one_of(
    st.none(),
    st.none(),
    st.sampled_from(["0", "-1", str(10**30), "\uff11\uff12", " 12", "12abc", "99999999"]),
    st.integers(0, 10**9).map(str),
)
QUERIES = st.dictionaries(
    st.sampled_from(
        [
            "state",
            "source",
            "rule",
            "trial",
            "q",
            "limit",
            "cursor",
            "count",
            "name",
            "scope",
            "triggered_after",
            "slot",
            "biz_key",
            "owner",
        ]
    ),
    st.one_of(PATH_TEXT, st.sampled_from(["\uff15", "\u0663", "true", "2026-12-01T09:00:00Z", "x" * 300])),
    max_size=3,
)


@pytest.mark.django_db
@hypothesis.settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[hypothesis.HealthCheck.too_slow, hypothesis.HealthCheck.data_too_large],
)
@hypothesis.given(
    route=st.sampled_from(ROUTES),
    arg=PATH_TEXT,
    # Weighted towards what the endpoints answer, so most examples get past method and auth checks.
    method=st.one_of(st.sampled_from(["GET", "POST"]), st.sampled_from(["PATCH", "PUT", "DELETE", "HEAD", "OPTIONS"])),
    body=BODIES,
    content_type=st.sampled_from(["application/json", "text/plain", "application/x-www-form-urlencoded", ""]),
    content_length=CONTENT_LENGTHS,
    query=QUERIES,
    authorization=st.one_of(
        st.just("token"), st.sampled_from(["none", "Bearer nope", "Basic eA==", "Bearer", "Bearer \uff11"])
    ),
)
def test_any_input_to_any_api_path_is_never_a_5xx_and_every_4xx_is_a_problem(
    route, arg, method, body, content_type, content_length, query, authorization
):
    token = _fuzz_token()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if authorization == "token" else {}
    if authorization not in ("token", "none"):
        headers["HTTP_AUTHORIZATION"] = authorization
    if content_length is not None:
        headers["CONTENT_LENGTH"] = content_length
    path = route.format(quote(arg, safe=""))
    if query:
        path += "?" + urlencode(query)
    response = Client().generic(method, path, data=body, content_type=content_type, **headers)
    assert response.status_code < 500, (method, path, response.status_code, response.content[:300])
    if response.status_code >= 400 and method != "HEAD":
        assert response["Content-Type"].startswith("application/problem+json"), (method, path, response.content[:300])
        problem = json.loads(response.content)
        assert problem["status"] == response.status_code and problem["type"] and problem["title"], problem
        assert problem["detail"], problem


def _fuzz_token() -> str:
    """One superuser's token for the whole run (the examples share the test's transaction)."""
    user = get_user_model().objects.filter(username="fuzz-root").first()
    if user is None:
        user = make_user("fuzz-root", superuser=True)
        make_failed_run(rule=daily_report())
    cached = getattr(user, "_fuzz_token", None) or _TOKENS.get(user.pk)
    if cached is None:
        cached = _TOKENS[user.pk] = token_create(name="fuzz", user=user, now=timezone.now())
    return cached


_TOKENS: dict[int, str] = {}
