"""Pure signature decisions: each scheme's signed string, several signatures, rotation keys, secret strength."""

import base64
import hashlib
import hmac
from datetime import UTC, datetime

import pytest
from standardwebhooks import Webhook

from tasks.rules import signatures
from tasks.rules.events import Refused
from tasks.rules.signatures import HARNESS, HARNESS_V1, STANDARD

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
TS = str(int(NOW.timestamp()))
KEY = b"k" * 8
BODY = b'{"object_id":"42"}'


def verify(scheme, header, *, keys=(KEY,), ts=TS, delivery="d-1", body=BODY):
    signatures.verify(scheme, list(keys), timestamp=ts, delivery_id=delivery, body=body, header=header)


def test_each_scheme_signs_its_documented_string():
    v2 = hmac.new(KEY, f"{TS}.d-1.".encode() + BODY, hashlib.sha256).hexdigest()
    v1 = hmac.new(KEY, f"{TS}.".encode() + BODY, hashlib.sha256).hexdigest()
    std = base64.b64encode(hmac.new(KEY, f"d-1.{TS}.".encode() + BODY, hashlib.sha256).digest()).decode()
    assert signatures.sign(HARNESS, KEY, timestamp=TS, delivery_id="d-1", body=BODY) == "v2=" + v2
    assert signatures.sign(HARNESS_V1, KEY, timestamp=TS, delivery_id="d-1", body=BODY) == "sha256=" + v1
    assert signatures.sign(STANDARD, KEY, timestamp=TS, delivery_id="d-1", body=BODY) == "v1," + std


def test_a_standard_signature_is_the_standardwebhooks_librarys():
    secret = "whsec_" + base64.b64encode(hashlib.sha256(b"x").digest()).decode()
    ours = signatures.sign(
        STANDARD, signatures.secret_key(STANDARD, secret), timestamp=TS, delivery_id="msg_1", body=BODY
    )
    assert ours == Webhook(secret).sign("msg_1", NOW, BODY.decode())


@pytest.mark.parametrize("scheme", [HARNESS, HARNESS_V1, STANDARD])
def test_any_listed_signature_with_any_active_key_verifies(scheme):
    other = b"o" * 32
    good = signatures.sign(scheme, other, timestamp=TS, delivery_id="d-1", body=BODY)
    verify(scheme, f"v1,bm9wZQ== {good}", keys=(KEY, other))


@pytest.mark.parametrize("scheme", [HARNESS, HARNESS_V1, STANDARD])
@pytest.mark.parametrize("header", ["", "sha256=" + "0" * 64, "v2=", "md5=abc", "sha256=ÿ", "v1,", "v1,%%%"])
def test_it_refuses_a_wrong_signature(scheme, header):
    with pytest.raises(Refused) as exc:
        verify(scheme, header)
    assert (exc.value.code, exc.value.status) == ("bad_signature", 401)


@pytest.mark.parametrize("scheme", [HARNESS, HARNESS_V1, STANDARD])
def test_it_refuses_a_signature_over_another_body_timestamp_or_key(scheme):
    good = signatures.sign(scheme, KEY, timestamp=TS, delivery_id="d-1", body=BODY)
    for ts, body, key in [(TS, b"{ }", KEY), (str(int(TS) + 1), BODY, KEY), (TS, BODY, b"other-key")]:
        with pytest.raises(Refused):
            verify(scheme, good, keys=(key,), ts=ts, body=body)


@pytest.mark.parametrize("scheme", [HARNESS, STANDARD])
def test_the_delivery_id_is_signed_except_in_v1(scheme):
    good = signatures.sign(scheme, KEY, timestamp=TS, delivery_id="d-1", body=BODY)
    with pytest.raises(Refused):
        verify(scheme, good, delivery="d-2")
    verify(HARNESS_V1, signatures.sign(HARNESS_V1, KEY, timestamp=TS, delivery_id="d-1", body=BODY), delivery="d-2")


def test_it_refuses_a_header_stuffed_with_signatures():
    with pytest.raises(Refused):
        verify(HARNESS, " ".join(["v2=00"] * 9))


@pytest.mark.parametrize(
    ("scheme", "secret", "weak"),
    [
        (HARNESS, "x" * 31 + "abcdefg", False),
        (HARNESS, "abcdefgh" * 3, True),  # 24 bytes
        (HARNESS, "ab" * 20, True),  # 40 bytes, 2 distinct characters
        (STANDARD, "whsec_" + base64.b64encode(bytes(range(24))).decode(), False),
        (STANDARD, base64.b64encode(bytes(range(24))).decode(), False),  # the prefix is optional
        (STANDARD, "whsec_" + base64.b64encode(bytes(range(23))).decode(), True),
        (STANDARD, "whsec_" + base64.b64encode(b"\0" * 32).decode(), True),
        (STANDARD, "whsec_not*base64", True),
    ],
)
def test_secret_strength(scheme, secret, weak):
    assert (signatures.secret_strength_error(scheme, secret) is not None) == weak
