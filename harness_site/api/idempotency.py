"""Is this request the one its idempotency key first named? Stripe's rule: the same key with the
same body answers the first result again; the same key with any other body is refused (409), so a
client's bug (a key reused for new work) is told, not silently answered with someone else's run.

The fingerprint is a SHA-256 of the body as JSON in one canonical spelling (keys sorted, no
spaces), so key order and whitespace are not part of a request's meaning. It is kept with the run
that recorded the key (`payload["once"]["fingerprint"]`, written by tasks.triggers.once in the
claim's own INSERT), so two racing requests compare against the one that won.
"""

import hashlib
import json

from harness_site.api.problems import ApiProblem


def request_fingerprint(body: dict) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def recorded_fingerprint(payload) -> str:
    """The fingerprint kept with a run; "" for a run recorded before fingerprints were kept."""
    once = payload.get("once") if isinstance(payload, dict) else None
    found = once.get("fingerprint") if isinstance(once, dict) else None
    return found if isinstance(found, str) else ""


def idempotency_check(*, key: str, fingerprint: str, payload) -> None:
    """Raise 409 problem details naming `key` when the run it names was asked for with another body.
    A run with no recorded fingerprint cannot be compared: it answers as before."""
    recorded = recorded_fingerprint(payload)
    if recorded and recorded != fingerprint:
        raise ApiProblem(
            409,
            "idempotency-key-reused",
            f"idempotency_key {key[:100]!r} already names a request with another body; "
            "repeat that request exactly, or send this one with a new key",
            field="idempotency_key",
            title="Idempotency key reused",
            key=key,
        )
