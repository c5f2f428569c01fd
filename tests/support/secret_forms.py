"""The forms in which a secret can be written: raw and every common escaping or encoding.

The fake model server (tests/support/fake_model.py) echoes the Authorization token in any of these
forms (`{key:<form>}` in a scripted body), and the secret tests search every surface for all of them.
Written independently of the redaction code it checks: standard library encoders only."""

import base64
import html
import json
from urllib.parse import quote, quote_plus


def _b64_cores(secret: bytes, alphabet: str) -> dict[str, str]:
    """The part of base64 that encodes only the secret, wherever it starts in a longer value (user:key)."""
    cores = {}
    for offset in (0, 1, 2):
        full = base64.b64encode(b"x" * offset + secret).decode()
        end = len(full) - (4 if (offset + len(secret)) % 3 else 0)
        core = full[4 if offset else 0 : end]
        if alphabet == "urlsafe":
            core = core.translate(str.maketrans("+/", "-_"))
        cores[f"b64_{alphabet}_core{offset}"] = core
    return cores


def forms(secret: str) -> dict[str, str]:
    raw = secret.encode()
    out = {
        "raw": secret,
        "json": json.dumps(secret)[1:-1],
        "json_u": "".join(f"\\u{ord(c):04x}" for c in secret),  # every character \u-escaped (valid JSON)
        "json_slash": secret.replace("/", "\\/"),  # PHP's json_encode escapes every /
        "json_twice": json.dumps("".join(f"\\u{ord(c):04x}" for c in secret))[1:-1],  # a JSON string inside JSON
        "repr": repr(secret)[1:-1],
        "repr_x": "".join(f"\\x{b:02x}" for b in raw),
        "url": quote(secret, safe=""),
        "url_plus": quote_plus(secret),
        "url_upper_every": "".join(f"%{b:02X}" for b in raw),
        "html": html.escape(secret),
        "html_entities": "".join(f"&#{ord(c)};" for c in secret),
        "html_hex_entities": "".join(f"&#x{ord(c):x};" for c in secret),
        "b64": base64.b64encode(raw).decode(),
        "b64_urlsafe": base64.urlsafe_b64encode(raw).decode(),
        "b64_nopad": base64.b64encode(raw).decode().rstrip("="),
        "basic": base64.b64encode(b"user:" + raw).decode(),
        "bearer_b64": base64.b64encode(b"Bearer " + raw).decode(),
        "hex": raw.hex(),
    }
    out.update(_b64_cores(raw, "std"))
    out.update(_b64_cores(raw, "urlsafe"))
    return out


def found(text: str, secret: str) -> list[str]:
    """The names of the forms of `secret` that occur in `text`."""
    return [name for name, value in forms(secret).items() if value and value in text]
