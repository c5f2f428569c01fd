"""Who is this Bearer? The one reader of `Authorization: Bearer <token>` for every API surface: the
REST API (/api/v1), the flags and ping API (/api/flags, /api/rules/<name>/ping) and /metrics.

One behaviour everywhere: no header means "no token" (the caller may still have a session); a
header that is not `Bearer <token>` (any case of "Bearer", one token) is refused; a token with a
NUL, longer than any we issue or that matches nothing active is refused with the same words, so
a caller learns nothing about which tokens exist. ApiTokens are stored as SHA-256 hashes only.
"""

import hashlib
import hmac
import secrets

from django.utils import timezone
from rest_framework import exceptions

from tasks.models import ApiToken

# Ours are "hk_" + 43 characters; nothing longer is worth hashing.
MAX_TOKEN = 200
MALFORMED = "Authorization must be 'Bearer <token>'."
UNKNOWN = "unknown or revoked token"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def token_create(*, name: str, user, now, scopes: list[str] | None = None) -> str:
    """A new API token for `user`; the plaintext is returned once and only its hash is stored.
    `scopes` narrows what it may do in the HTTP APIs (tasks.models.access.API_SCOPES); None: all."""
    token = "hk_" + secrets.token_urlsafe(32)
    found = ApiToken(name=name, user=user, token_hash=token_hash(token), created_at=now)
    if scopes is not None:
        found.scopes = list(scopes)
    found.full_clean(exclude=["user", "token_hash"])
    found.save()
    return token


def bearer_credential(request) -> str | None:
    """The token of `Authorization: Bearer <token>`; None when there is no Authorization header.
    Raises AuthenticationFailed for any other shape of the header."""
    header = request.headers.get("Authorization", "")
    if not header:
        return None
    scheme, _sep, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        raise exceptions.AuthenticationFailed(MALFORMED)
    if "\x00" in token or len(token) > MAX_TOKEN:
        raise exceptions.AuthenticationFailed(UNKNOWN)
    return token


def token_find(token: str) -> ApiToken:
    """The active ApiToken with this plaintext, its use recorded; AuthenticationFailed otherwise."""
    found = ApiToken.objects.select_related("user").filter(token_hash=token_hash(token)).first()
    if found is None or not found.user.is_active:
        raise exceptions.AuthenticationFailed(UNKNOWN)
    ApiToken.objects.filter(pk=found.pk).update(last_used_at=timezone.now())
    return found


def secret_matches(given: str, expected: str) -> bool:
    """A shared secret compared in constant time: digests first, so neither its length nor a
    prefix leaks through timing."""
    return hmac.compare_digest(token_hash(given).encode(), token_hash(expected).encode())
