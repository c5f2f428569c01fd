"""Which secrets may this process hand out? Only those the deployment granted.

An agent's API key and a webhook source's secret are named by environment variable, never stored.
The name is the operator's to choose, but only among the variables the deployment declared secrets:
those under ``HARNESS_SECRET_PREFIX`` (default ``HARNESS_SECRET_``) or listed in ``HARNESS_SECRETS``.
Any other name (``SECRET_KEY``, ``DATABASE_URL``, ``HOME``...) is refused when saved and never read at
call time, so whoever can edit an agent cannot make the harness send a value it was not given
(invariant 8, docs/secrets.md).

A granted secret is also bound to one purpose, which the deployment declares in ``HARNESS_GRANTS``:
a model key (for calls to the URL roots it names), a webhook signing secret, or an alert channel's
secret. Every use says its purpose, so an operator cannot point an agent at the webhook signing
secret (the model provider would receive it) nor a webhook source at a model key.
"""

import os
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from django.conf import settings
from django.utils.translation import gettext

from tasks.outbound import plain_url_error, url_allow_error, url_under_root

NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")


# What a granted secret may be used for (HARNESS_GRANTS): one purpose per secret.
MODEL, WEBHOOK, ALERT = "model", "webhook", "alert"
PURPOSES = (MODEL, WEBHOOK, ALERT)
GRANTS = "HARNESS_GRANTS"
GRANTS_EXAMPLE = "HARNESS_SECRET_OPENAI=model@https://api.openai.com/v1,HARNESS_SECRET_BILLING_HOOK=webhook"


@dataclass(frozen=True)
class Grant:
    """What the deployment declared one secret for; `urls`: the roots a model key may be sent to."""

    purpose: str
    urls: tuple[str, ...] = ()


@dataclass(frozen=True)
class Refusal:
    """Why a secret may not serve a use: `code` for a translated message, `text` for logs and errors."""

    code: str  # not_granted, undeclared, other_purpose, other_url
    text: str
    name: str = ""
    grant: Grant | None = None


def grant_name_error(name: str, *, prefix: str, listed: Collection[str], never: Collection[str]) -> str | None:
    """Why `name` is not a granted secret under this prefix and list, or None when it is."""
    if not NAME.fullmatch(name or ""):
        return "not an environment variable name (capitals, digits and _)"
    if name in never:
        return "not granted, ever: it is one of the site's own keys"
    if name.startswith(prefix) and len(name) > len(prefix):
        return None
    if name in listed:
        return None
    return f"not granted: this deployment grants variables named {prefix}* or listed in HARNESS_SECRETS"


def secret_name_error(name: str) -> str | None:
    """Why `name` is not a granted secret, or None when it is."""
    return grant_name_error(
        name,
        prefix=settings.HARNESS_SECRET_PREFIX,
        listed=settings.HARNESS_SECRETS,
        never=settings.HARNESS_NEVER_SECRETS,
    )


def grants_parse(entries: Iterable[str], *, name_error) -> tuple[dict[str, Grant], list[str]]:
    """HARNESS_GRANTS entries (NAME=model@URL, NAME=webhook, NAME=alert) as grants, and what is wrong.

    A model key may be declared several times, one URL root each; a secret has one purpose only.
    `name_error(name)` says why a name is not a granted secret."""
    grants: dict[str, Grant] = {}
    problems: list[str] = []
    for entry in entries:
        name, sep, use = entry.partition("=")
        purpose, at, url = use.partition("@")
        name, purpose, url = name.strip(), purpose.strip(), url.strip()
        if not sep or purpose not in PURPOSES:
            problems.append(f"entry {entry!r} is not NAME=model@URL, NAME=webhook or NAME=alert")
            continue
        if (why := name_error(name)) is not None:
            problems.append(f"entry {entry!r}: {name} is {why}")
            continue
        if purpose == MODEL and not url:
            problems.append(f"entry {entry!r}: a model key names the URL root it may be sent to (model@URL)")
            continue
        if purpose != MODEL and at:
            problems.append(f"entry {entry!r}: only a model key takes a URL")
            continue
        if url and (why := plain_url_error(url)) is not None:
            problems.append(f"entry {entry!r}: {url} is {why}")
            continue
        before = grants.get(name)
        if before is not None and before.purpose != purpose:
            problems.append(f"{name} is declared for {before.purpose} and for {purpose}: one purpose per secret")
            continue
        grants[name] = Grant(purpose, (before.urls if before else ()) + ((url,) if url else ()))
    return grants, problems


def secret_use_refusal(name: str, purpose: str, *, url: str | None = None) -> Refusal | None:
    """Why the secret `name` may not serve `purpose` (a model key: sent to `url`), or None when it may.

    It must be granted (secret_name_error), declared in HARNESS_GRANTS for this purpose, and a model
    key's `url` must lie under one of the roots declared for it (url None: not checked here)."""
    if (why := secret_name_error(name)) is not None:
        return Refusal("not_granted", why, name)
    grant = settings.HARNESS_SECRET_GRANTS.get(name)
    if grant is None:
        return Refusal("undeclared", f"not declared for any use: {GRANTS} says what each secret is for", name)
    if grant.purpose != purpose:
        return Refusal("other_purpose", f"declared in {GRANTS} for {grant.purpose}, not for {purpose}", name, grant)
    if purpose == MODEL and url is not None and not any(url_under_root(url, root) for root in grant.urls):
        return Refusal(
            "other_url", f"declared in {GRANTS} for model calls to {', '.join(grant.urls)} only", name, grant
        )
    return None


def secret_use_message(refusal: Refusal) -> str:
    """The refusal for a form or an API field, in the user's language; never a value."""
    labels = {MODEL: gettext("model keys"), WEBHOOK: gettext("webhook signing"), ALERT: gettext("alert channels")}
    if refusal.code == "undeclared":
        return gettext(
            "Not declared: the deployment's HARNESS_GRANTS does not say what %(name)s is for, so it serves no use."
        ) % {"name": refusal.name}
    if refusal.code == "other_purpose" and refusal.grant is not None:
        return gettext("Not for this use: the deployment declared %(name)s for %(purpose)s (HARNESS_GRANTS).") % {
            "name": refusal.name,
            "purpose": labels.get(refusal.grant.purpose, refusal.grant.purpose),
        }
    if refusal.code == "other_url" and refusal.grant is not None:
        return gettext(
            "Not for this URL: the deployment declared %(name)s for model calls to %(urls)s only (HARNESS_GRANTS)."
        ) % {"name": refusal.name, "urls": ", ".join(refusal.grant.urls)}
    return gettext(
        "Not granted: this deployment hands out only variables named %(prefix)s… or listed in HARNESS_SECRETS."
    ) % {"prefix": settings.HARNESS_SECRET_PREFIX}


def secret_value(name: str, purpose: str, *, url: str | None = None) -> str | None:
    """The secret's value in this process for `purpose` (a model key: sent to `url`); None when it may
    not serve that use (secret_use_refusal) or is not set."""
    if secret_use_refusal(name, purpose, url=url) is not None:
        return None
    return os.environ.get(name) or None


def agent_url_error(url: str) -> str | None:
    """Why an agent may not send its key to `url`, or None when the deployment allows it.

    Allowed: a plain URL (plain_url_error) under one entry of HARNESS_AGENT_URL_ALLOW: same scheme,
    same host, the entry's port if it names one (any port if not), and a decoded path equal to the
    entry's path or below it by whole segments. A host is compared whole, never as a string prefix
    (api.example.com.attacker.test)."""
    return url_allow_error(url, settings.HARNESS_AGENT_URL_ALLOW, setting="HARNESS_AGENT_URL_ALLOW", what="agent keys")
