"""A real client nobody here wrote: Schemathesis reads the served OpenAPI schema and fuzzes every
operation against a live server (Django's, in a thread): no response may be a 5xx, and every
response must conform to the schema (status code, content type, headers, body), and data outside
the schema must be refused with a 4xx. Bounded: a few examples per operation, one worker, well
under a minute."""

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.utils import timezone

from deadletters.models import DeadLetter
from harness_site.api.tokens import token_create
from tests.support.desk import make_failed_run, make_rule, make_user

pytestmark = [pytest.mark.backend]

CHECKS = ",".join(
    (
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_headers_conformance",
        "response_schema_conformance",
        "negative_data_rejection",
    )
)
MAX_EXAMPLES = 5


def test_schemathesis_finds_no_5xx_and_no_response_outside_the_schema(live_server, tmp_path):
    rule = make_rule()
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
