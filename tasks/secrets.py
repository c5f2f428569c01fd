"""Which secrets may this process hand out? Only those the deployment granted.

An agent's API key and a webhook source's secret are named by environment variable, never stored.
The name is the operator's to choose, but only among the variables the deployment declared secrets:
those under ``HARNESS_SECRET_PREFIX`` (default ``HARNESS_SECRET_``) or listed in ``HARNESS_SECRETS``.
Any other name (``SECRET_KEY``, ``DATABASE_URL``, ``HOME``...) is refused when saved and never read at
call time, so whoever can edit an agent cannot make the harness send a value it was not given
(invariant 8, docs/secrets.md).
"""

import os
import re
from urllib.parse import unquote, urlsplit

from django.conf import settings

NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")
DEFAULT_PORTS = {"http": 80, "https": 443}


def secret_name_error(name: str) -> str | None:
    """Why `name` is not a granted secret, or None when it is."""
    if not NAME.fullmatch(name or ""):
        return "not an environment variable name (capitals, digits and _)"
    if name in settings.HARNESS_NEVER_SECRETS:
        return "not granted, ever: it is one of the site's own keys"
    prefix = settings.HARNESS_SECRET_PREFIX
    if name.startswith(prefix) and len(name) > len(prefix):
        return None
    if name in settings.HARNESS_SECRETS:
        return None
    return f"not granted: this deployment grants variables named {prefix}* or listed in HARNESS_SECRETS"


def secret_value(name: str) -> str | None:
    """The granted secret's value in this process; None when it is not granted or not set."""
    if secret_name_error(name) is not None:
        return None
    return os.environ.get(name) or None


# Percent-encoding is decoded until it stops changing; a path still changing after this many rounds
# is refused rather than decoded further.
MAX_DECODE_ROUNDS = 4
# Characters a server may read as path structure even when encoded (/ \ . ; and % itself, which
# starts a second round of decoding): an allowed root must not be escaped through any of them.
_ENCODED_STRUCTURE = re.compile(r"%(2f|5c|2e|3b|25)", re.IGNORECASE)
_PLAIN_SEGMENT = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,=:@]+")


def plain_url_path(path: str) -> str | None:
    """`path` as a server would finally read it, or None when servers may read it differently.

    Decoded until it stops changing, it must be ASCII segments of unreserved characters (no ; path
    parameters, backslashes, whitespace or controls), with no `.`/`..` and no empty segment but a
    trailing one; and the raw text must not encode a separator, a dot, a ; or a %. Then what is
    compared with an allowed root is what any server on the way sees: Tomcat's `..;`, a proxy that
    decodes twice, one that folds full-width dots or backslashes."""
    if _ENCODED_STRUCTURE.search(path):
        return None
    decoded = path
    for _round in range(MAX_DECODE_ROUNDS):
        try:
            once = unquote(decoded, errors="strict")
        except UnicodeDecodeError:
            return None
        if once == decoded:
            break
        decoded = once
    else:
        return None
    if decoded and not decoded.startswith("/"):
        return None
    inner = decoded.removeprefix("/").removesuffix("/")
    segments = inner.split("/") if inner else []
    if any(not _PLAIN_SEGMENT.fullmatch(s) or s in {".", ".."} for s in segments):
        return None
    return decoded


def plain_url_error(url: str) -> str | None:
    """Why `url` is not a plain http(s) URL that every server reads the same way, or None."""
    parts = urlsplit(url or "")
    try:
        parts.port  # noqa: B018  (raises on a port that is not a number)
    except ValueError:
        return "not a URL"
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname or "%" in parts.netloc:
        return "not a URL (http or https and a host)"
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment:
        return "not a plain URL (no user, query string or fragment)"
    if plain_url_path(parts.path) is None:
        return (
            "not a plain URL (no ; path parameters, backslashes, encoded separators or dots, "
            ". or .. segments, or characters outside ASCII)"
        )
    return None


def agent_url_error(url: str) -> str | None:
    """Why an agent may not send its key to `url`, or None when the deployment allows it.

    Allowed: a plain URL (plain_url_error) under one entry of HARNESS_AGENT_URL_ALLOW: same scheme,
    same host, the entry's port if it names one (any port if not), and a decoded path equal to the
    entry's path or below it by whole segments. A host is compared whole, never as a string prefix
    (api.example.com.attacker.test)."""
    refused = plain_url_error(url)
    if refused is not None:
        return refused
    parts = urlsplit(url)
    path = (plain_url_path(parts.path) or "").rstrip("/")
    for entry in settings.HARNESS_AGENT_URL_ALLOW:
        allow = urlsplit(entry)
        if allow.scheme != parts.scheme or allow.hostname != parts.hostname:
            continue
        if allow.port is not None and (parts.port or DEFAULT_PORTS.get(parts.scheme)) != allow.port:
            continue
        root = allow.path.rstrip("/")
        if path == root or path.startswith(root + "/"):
            return None
    return "not allowed: this deployment sends agent keys only to the URLs in HARNESS_AGENT_URL_ALLOW"
