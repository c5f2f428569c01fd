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
from urllib.parse import urlsplit

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


def agent_url_error(url: str) -> str | None:
    """Why an agent may not send its key to `url`, or None when the deployment allows it.

    Allowed: a URL under one entry of HARNESS_AGENT_URL_ALLOW: same scheme, same host, the entry's port
    if it names one (any port if not), and a path equal to the entry's path or below it by whole
    segments. A host is compared whole, never as a string prefix (api.example.com.attacker.test)."""
    parts = urlsplit(url or "")
    try:
        port = parts.port
    except ValueError:
        return "not a URL"
    segments = parts.path.split("/")
    if not parts.hostname or any(s in {".", ".."} or "%2e" in s.lower() for s in segments):
        return "not a plain URL (a host, no . or .. in the path)"
    for entry in settings.HARNESS_AGENT_URL_ALLOW:
        allow = urlsplit(entry)
        if allow.scheme != parts.scheme or allow.hostname != parts.hostname:
            continue
        if allow.port is not None and (port or DEFAULT_PORTS.get(parts.scheme)) != allow.port:
            continue
        root = allow.path.rstrip("/")
        path = parts.path.rstrip("/")
        if path == root or path.startswith(root + "/"):
            return None
    return "not allowed: this deployment sends agent keys only to the URLs in HARNESS_AGENT_URL_ALLOW"
