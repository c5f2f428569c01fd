"""Schemathesis hooks for tests/api/test_schemathesis.py (loaded by file, SCHEMATHESIS_HOOKS)."""

import schemathesis

PROBLEM = "application/problem+json"


@schemathesis.check
def problem_details_on_every_error(ctx, response, case):
    """Every 4xx and 5xx is an RFC 9457 problem document of the same status."""
    if response.status_code < 400:
        return None
    content_type = response.headers.get("content-type", [""])
    content_type = content_type[0] if isinstance(content_type, list) else content_type
    if not content_type.startswith(PROBLEM):
        raise AssertionError(f"{response.status_code} answered as {content_type!r}, not {PROBLEM}")
    body = response.json()
    missing = [k for k in ("type", "title", "status", "detail") if not body.get(k)]
    if missing or body["status"] != response.status_code:
        raise AssertionError(f"not a problem document of status {response.status_code}: {body}")
    return None
