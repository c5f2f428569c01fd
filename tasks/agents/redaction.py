"""How a secret never comes back out: every form of it is replaced by [redacted].

A provider may echo the key it was sent raw, JSON-escaped (\\u0073k-…, \\/ , a JSON string inside JSON),
repr-escaped (\\x73), URL-encoded (%2F, quote_plus, double-encoded %252F), HTML-escaped (&#115;,
&#x73;, &amp;), base64 (standard or URL-safe, with or without padding, alone or inside a longer value
such as a Basic `user:key` header) or as hex. `redact()` is the one home for all of them: the model
client passes every text a provider sends back through it before the text can become a result, a
step checkpoint, an error, a ticket, an alert or a log line (docs/secrets.md).

Each character of a form may appear literally or escaped in any of those ways, independently, so
mixed escapings ("sk-\\u0070roj") are caught too. Over-redaction is harmless; a missed form is a leak.
"""

import base64
import re
import threading
from functools import lru_cache

REDACTED = "[redacted]"
# base64 of a secret inside a longer value has a middle that depends only on the secret; shorter
# middles than this would redact ordinary text.
MIN_B64_CORE = 8
_HTML_NAMED = {"&": "amp", "<": "lt", ">": "gt", '"': "quot", "'": "apos"}


def _char(ch: str) -> str:
    """One character of a secret, literal or escaped, at any escaping depth (\\\\u…, %25…)."""
    code = ord(ch)
    utf8 = ch.encode()
    alternatives = [
        r"\\*" + re.escape(ch),  # literal, or backslash-escaped (JSON's \/ and \", repr's \')
        rf"\\+u(?i:{code:04x})",  # JSON / JavaScript \u escape
        rf"\\+U(?i:{code:08x})",
        "".join(rf"\\+x(?i:{b:02x})" for b in utf8),  # repr / C escape of each UTF-8 byte
        "".join(rf"%(?:25)*(?i:{b:02x})" for b in utf8),  # URL-encoded, maybe more than once
        rf"&(?:amp;)*#0*{code};",  # HTML decimal entity
        rf"&(?:amp;)*#(?i:x)0*(?i:{code:x});",  # HTML hex entity
    ]
    if ch in _HTML_NAMED:
        alternatives.append(rf"&(?:amp;)*{_HTML_NAMED[ch]};")
    if ch == " ":
        alternatives.append(r"\+")  # quote_plus
    return "(?:" + "|".join(alternatives) + ")"


def _b64_cores(raw: bytes) -> set[str]:
    """The base64 characters that encode only `raw`, for each of the three byte alignments at which it
    can start inside a longer encoded value, in the standard and the URL-safe alphabet."""
    cores = set()
    for offset in (0, 1, 2):
        full = base64.b64encode(b"\0" * offset + raw).decode()
        end = len(full) - (4 if (offset + len(raw)) % 3 else 0)
        core = full[4 if offset else 0 : end]
        if len(core) >= MIN_B64_CORE:
            cores.add(core)
            cores.add(core.translate(str.maketrans("+/", "-_")))
    return cores


def secret_forms(secret: str) -> list[str]:
    """The plain strings to look for, each then matched in every escaping: the secret, its base64
    cores and its hex; longest first so a longer form is replaced before a form it contains."""
    raw = secret.encode()
    forms = {secret, raw.hex()} | _b64_cores(raw)
    return sorted(forms, key=len, reverse=True)


# One build per key at a time: a pattern costs tens of milliseconds of CPU, and the runs waiting on one
# provider get their answers together; lru_cache alone lets every thread that misses build it again.
_building = threading.Lock()


def _pattern(secrets: tuple[str, ...]) -> re.Pattern[str]:
    with _building:
        return _built(secrets)


@lru_cache(maxsize=64)
def _built(secrets: tuple[str, ...]) -> re.Pattern[str]:
    forms = sorted({f for s in secrets for f in secret_forms(s)}, key=len, reverse=True)
    hexes = {s.encode().hex() for s in secrets}  # hex may come in either case, or mixed
    return re.compile(
        "|".join(("(?i:{})" if form in hexes else "{}").format("".join(_char(ch) for ch in form)) for form in forms)
    )


def redact(text: str, *secrets: str | None) -> str:
    """`text` with every raw, escaped or encoded form of each secret replaced by [redacted]."""
    given = tuple(sorted({s for s in secrets if s}))
    if not text or not given:
        return text
    return _pattern(given).sub(REDACTED, text)
