"""redact(): every raw, escaped or encoded form of a secret, and nothing else. Pure, no database."""

import base64
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from tasks.agents.redaction import REDACTED, _built, redact
from tests.support.secret_forms import forms, found

KEY = "sk-proj/Zq81+mXc0=VbN2lKj7HgF5dS3aP9oI"


@pytest.mark.parametrize("form", sorted(forms(KEY)))
def test_it_redacts_each_form_inside_ordinary_text(form):
    text = f"error 401: the key {forms(KEY)[form]} is not valid"

    out = redact(text, KEY)

    assert found(out, KEY) == [] and REDACTED in out
    assert out.startswith("error 401: the key ") and out.endswith(" is not valid")


def test_it_redacts_a_mixed_escaping_and_keeps_json_valid():
    body = json.dumps({"error": "sk-\\u0070roj" + KEY[7:] + " and " + json.dumps({"k": KEY}, ensure_ascii=True)})

    out = redact(body, KEY)

    assert found(out, KEY) == [] and found(json.dumps(json.loads(out)), KEY) == []
    assert json.loads(out)["error"].count(REDACTED) == 2


def test_it_redacts_a_key_inside_a_basic_authorization_value_at_any_offset():
    for user in ("u", "us", "use", "user"):
        header = base64.b64encode(f"{user}:{KEY}".encode()).decode()
        assert REDACTED in redact(header, KEY), user


def test_it_leaves_text_without_the_secret_alone():
    text = 'sk-proj/ is a prefix, "Zq81" is a fragment, &#115; is one letter, %2F a slash'
    assert redact(text, KEY) == text
    assert redact(text, None) == text and redact("", KEY) == ""


def test_it_redacts_several_secrets_at_once():
    other = "whsec_0123456789abcdefghij"
    assert redact(f"{KEY} {other}", KEY, other) == f"{REDACTED} {REDACTED}"


@pytest.mark.parametrize("case", ["lower", "upper", "mixed"])
def test_it_redacts_the_hex_form_in_either_case(case):
    key = "sk-live-hexcase-0123456789"
    hexed = key.encode().hex()
    shown = {
        "lower": hexed,
        "upper": hexed.upper(),
        "mixed": "".join(c.upper() if i % 2 else c for i, c in enumerate(hexed)),
    }
    assert redact(f"echo {shown[case]} end", key) == f"echo {REDACTED} end"


def test_many_threads_meeting_a_new_key_build_its_pattern_once():
    # Building the pattern of a key costs tens of milliseconds of CPU. A thousand runs waiting on one
    # provider get their answers at the same moment: each must not build it again meanwhile.
    _built.cache_clear()
    start = threading.Barrier(40)

    def answer() -> str:
        start.wait()
        return redact(f"echo {KEY}", "sk-thundering-herd-0123456789", KEY)

    with ThreadPoolExecutor(max_workers=40) as pool:
        texts = list(pool.map(lambda _: answer(), range(40)))
    assert texts == [f"echo {REDACTED}"] * 40
    assert _built.cache_info().misses == 1
