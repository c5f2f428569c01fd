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

from django.conf import settings

NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")


def secret_name_error(name: str) -> str | None:
    """Why `name` is not a granted secret, or None when it is."""
    if not NAME.fullmatch(name or ""):
        return "not an environment variable name (capitals, digits and _)"
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
