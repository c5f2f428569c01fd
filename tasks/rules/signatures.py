"""Is this webhook signed by a holder of the source's secret? Schemes, signatures, secret strength. Pure.

Three per-source schemes (docs/events.md, "Signature schemes"):

* ``harness``: ``X-Harness-Signature: v2=<hex>``, HMAC-SHA256 over ``<timestamp>.<delivery-id>.<body>``,
  so the delivery id is signed too.
* ``harness-v1``: the first version, ``sha256=<hex>`` over ``<timestamp>.<body>``; the delivery id is not
  signed. Kept only so senders written before v2 keep working; the admin warns about it.
* ``standard``: Standard Webhooks (https://www.standardwebhooks.com, Svix and others): ``webhook-id``,
  ``webhook-timestamp``, ``webhook-signature: v1,<base64>`` over ``<id>.<timestamp>.<body>``, keyed with
  the base64-decoded ``whsec_`` secret. Checked by the spec here, because the `standardwebhooks`
  library reads the wall clock and answers every failure with one exception; the tests sign with it.

Every scheme accepts several space-separated signatures in the header and any of the source's active
secrets (two during a rotation), comparing in constant time.
"""

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass

from tasks.rules.events import HEADER_DELIVERY, HEADER_SIGNATURE, HEADER_TIMESTAMP, Refused

HARNESS = "harness"
HARNESS_V1 = "harness-v1"
STANDARD = "standard"
SCHEMES = (HARNESS, HARNESS_V1, STANDARD)

# Secret strength: a harness secret is the HMAC key as text, at least 32 bytes; a Standard Webhooks
# secret is whsec_ + base64 of at least 24 random bytes (the spec's minimum). Both need at least 8
# distinct characters/bytes, which turns away "aaaa…" and "0000…" fillers.
MIN_HARNESS_SECRET_BYTES = 32
MIN_STANDARD_SECRET_BYTES = 24
MIN_DISTINCT = 8
STANDARD_SECRET_PREFIX = "whsec_"
# A sender lists one signature per secret it signs with; more than this is not a rotation.
MAX_SIGNATURES = 8


@dataclass(frozen=True)
class Headers:
    """The header names one scheme reads."""

    timestamp: str
    delivery: str
    signature: str


HARNESS_HEADERS = Headers(HEADER_TIMESTAMP, HEADER_DELIVERY, HEADER_SIGNATURE)
STANDARD_HEADERS = Headers("webhook-timestamp", "webhook-id", "webhook-signature")


def headers_for(scheme: str) -> Headers:
    return STANDARD_HEADERS if scheme == STANDARD else HARNESS_HEADERS


def secret_key(scheme: str, secret: str) -> bytes:
    """The HMAC key a secret stands for; raises ValueError (with why) when it is too weak to use."""
    if scheme == STANDARD:
        encoded = secret.removeprefix(STANDARD_SECRET_PREFIX)
        try:
            key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("a Standard Webhooks secret is whsec_ followed by base64") from None
        if len(key) < MIN_STANDARD_SECRET_BYTES or len(set(key)) < MIN_DISTINCT:
            raise ValueError(f"decodes to fewer than {MIN_STANDARD_SECRET_BYTES} random-looking bytes")
        return key
    key = secret.encode()
    if len(key) < MIN_HARNESS_SECRET_BYTES or len(set(secret)) < MIN_DISTINCT:
        raise ValueError(f"shorter than {MIN_HARNESS_SECRET_BYTES} bytes or not random-looking")
    return key


def secret_strength_error(scheme: str, secret: str) -> str | None:
    try:
        secret_key(scheme, secret)
    except ValueError as exc:
        return str(exc)
    return None


def sign(scheme: str, key: bytes, *, timestamp: str, delivery_id: str, body: bytes) -> str:
    """One signature as it appears in the scheme's signature header."""
    if scheme == STANDARD:
        digest = hmac.new(key, f"{delivery_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
        return "v1," + base64.b64encode(digest).decode()
    if scheme == HARNESS_V1:
        return "sha256=" + hmac.new(key, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return "v2=" + hmac.new(key, f"{timestamp}.{delivery_id}.".encode() + body, hashlib.sha256).hexdigest()


def verify(scheme: str, keys: list[bytes], *, timestamp: str, delivery_id: str, body: bytes, header: str) -> None:
    """Raise Refused("bad_signature") unless one signature in `header` matches one of `keys`."""
    given = header.split()
    if len(given) > MAX_SIGNATURES:
        raise Refused("bad_signature", f"more than {MAX_SIGNATURES} signatures in one header", status=401)
    for key in keys:
        expected = sign(scheme, key, timestamp=timestamp, delivery_id=delivery_id, body=body).encode()
        for candidate in given:
            if hmac.compare_digest(expected, candidate.encode("ascii", "replace")):
                return
    header_name = headers_for(scheme).signature
    raise Refused("bad_signature", f"{header_name} does not match: {DESCRIPTIONS[scheme]}", status=401)


DESCRIPTIONS = {
    HARNESS: "expected v2=<hex HMAC-SHA256 of '<timestamp>.<delivery-id>.<body>'> with this source's secret",
    HARNESS_V1: "expected sha256=<hex HMAC-SHA256 of '<timestamp>.<body>'> with this source's secret",
    STANDARD: "expected v1,<base64 HMAC-SHA256 of '<webhook-id>.<webhook-timestamp>.<body>'> (Standard Webhooks)",
}
