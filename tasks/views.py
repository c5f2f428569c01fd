"""The HTTP API for readiness flags and heartbeat pings. JSON in, JSON out; every refusal a 4xx with a reason.

A refusal is `{"ok": false, "reason": "<code>", "error": "<what, for a human>"}`; the codes are listed in
docs/evaluation.md. Bodies are strict JSON (tasks/rules/json_input.py): no NaN, no NUL, bounded nesting.

Authentication: `Authorization: Bearer <token>` (an ApiToken, acting with its user's permissions within
its scopes: flags:read to list, flags:write to set, clear and ping) or a
Django session, which must then pass the CSRF check like any form post. Permissions:
tasks.view_readinessflag to list, tasks.add_readinessflag to set, tasks.delete_readinessflag to clear,
tasks.send_ping to ping a heartbeat rule.
"""

import hashlib
import secrets

from django.http import JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from tasks.flags import FlagError, flag_clear, flag_json, flag_list, flag_set
from tasks.models import ApiToken, TriggerRule
from tasks.rules.json_limits import strict_loads
from tasks.triggers.heartbeat import rule_ping

MAX_BODY = 16 * 1024
MAX_QUERY_VALUE = 200  # a flag name or scope is at most 200 characters


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


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


def _refuse(status: int, reason: str, error: str, **extra) -> JsonResponse:
    return JsonResponse({"ok": False, "reason": reason, "error": error, **extra}, status=status)


def _authenticate(request):
    """(user, None) or (None, refusal)."""
    header = request.headers.get("Authorization", "")
    if header:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None, _refuse(401, "bad_authorization", "Authorization must be 'Bearer <token>'")
        found = ApiToken.objects.select_related("user").filter(token_hash=token_hash(token.strip())).first()
        if found is None or not found.user.is_active:
            return None, _refuse(401, "unknown_token", "unknown or revoked token")
        scope = "flags:read" if request.method == "GET" else "flags:write"
        if not found.allows(scope):
            return None, _refuse(403, "token_scope", f"this token lacks the scope {scope!r}")
        ApiToken.objects.filter(pk=found.pk).update(last_used_at=timezone.now())
        return found.user, None
    if request.user.is_authenticated:
        # A session is a browser: the same CSRF check as any form post.
        refusal = CsrfViewMiddleware(lambda r: None).process_view(request, None, (), {})
        if refusal is not None:
            return None, _refuse(
                403, "csrf_failed", "CSRF check failed: send the csrftoken cookie and the X-CSRFToken header"
            )
        return request.user, None
    return None, _refuse(
        401, "authentication_required", "authentication required: a Bearer token or a logged-in session"
    )


def _guarded(perm: str, methods: tuple[str, ...]):
    def decorator(view):
        @csrf_exempt  # token clients have no CSRF cookie; sessions are checked in _authenticate
        def wrapped(request, *args, **kwargs):
            if request.method not in methods:
                response = _refuse(
                    405, "method_not_allowed", f"method {request.method} not allowed; use {' or '.join(methods)}"
                )
                response["Allow"] = ", ".join(methods)
                return response
            user, refusal = _authenticate(request)
            if refusal is not None:
                return refusal
            if not user.has_perm(perm):
                return _refuse(403, "permission_denied", f"permission {perm!r} required")
            return view(request, user, *args, **kwargs)

        return wrapped

    return decorator


def _body(request) -> tuple[dict | None, JsonResponse | None]:
    """The JSON object in the body, or a refusal. The length is checked before anything is read."""
    try:
        claimed = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        claimed = 0
    if claimed > MAX_BODY:
        return None, _refuse(413, "body_too_large", f"body larger than {MAX_BODY} bytes")
    raw = request.read(MAX_BODY + 1)
    if len(raw) > MAX_BODY:
        return None, _refuse(413, "body_too_large", f"body larger than {MAX_BODY} bytes")
    if not raw:
        return {}, None
    if request.content_type not in ("application/json", ""):
        return None, _refuse(415, "unsupported_media_type", "send Content-Type: application/json")
    try:
        data = strict_loads(raw)
    except ValueError as exc:
        return None, _refuse(400, "malformed_json", f"body is not valid JSON: {exc}")
    if not isinstance(data, dict):
        return None, _refuse(
            400,
            "malformed_json",
            'body must be a JSON object, e.g. {"name": "pipeline.raw_data.ready", "scope": "2026-12-01"}',
        )
    return data, None


def _text(value: str, *, field: str) -> JsonResponse | None:
    """A refusal for a string PostgreSQL would refuse (NUL) or that is longer than any stored one."""
    if "\x00" in value or len(value) > MAX_QUERY_VALUE:
        return _refuse(400, "invalid_input", f"{field}: at most {MAX_QUERY_VALUE} characters, no NUL", field=field)
    return None


@_guarded("tasks.view_readinessflag", ("GET",))
def flags_list_view(request, user):
    for field in ("name", "scope"):
        refusal = _text(request.GET.get(field, ""), field=field)
        if refusal is not None:
            return refusal
    try:
        flags = flag_list(name=request.GET.get("name") or None, scope=request.GET.get("scope") or None)
    except FlagError as exc:
        return _refuse(400, "invalid_field", str(exc), field=exc.field)
    return JsonResponse({"ok": True, "flags": [flag_json(f) for f in flags]})


@_guarded("tasks.add_readinessflag", ("POST",))
def flags_set_view(request, user):
    data, refusal = _body(request)
    if refusal is not None:
        return refusal
    try:
        flag, created = flag_set(
            name=data.get("name"),
            scope=data.get("scope"),
            note=data.get("note", ""),
            actor=user.get_username(),
            now=timezone.now(),
        )
    except FlagError as exc:
        return _refuse(400, "invalid_field", str(exc), field=exc.field)
    return JsonResponse({"ok": True, "created": created, "flag": flag_json(flag)}, status=201 if created else 200)


@_guarded("tasks.delete_readinessflag", ("POST",))
def flags_clear_view(request, user):
    data, refusal = _body(request)
    if refusal is not None:
        return refusal
    try:
        cleared = flag_clear(name=data.get("name"), scope=data.get("scope"), actor=user.get_username())
    except FlagError as exc:
        return _refuse(400, "invalid_field", str(exc), field=exc.field)
    return JsonResponse({"ok": True, "cleared": cleared})


@_guarded("tasks.send_ping", ("POST",))
def ping_view(request, user, rule):
    # A name with a NUL cannot be a rule's, and PostgreSQL refuses it in a query.
    found = None if "\x00" in rule else TriggerRule.objects.filter(name=rule).first()
    if found is None:
        return _refuse(404, "unknown_rule", f"no rule named {rule[:200]!r}")
    try:
        deadline = rule_ping(rule=found, now=timezone.now())
    except ValueError as exc:
        return _refuse(400, "not_a_heartbeat_rule", str(exc))
    return JsonResponse({"ok": True, "rule": found.name, "fires_if_silent_until": deadline.isoformat()})
