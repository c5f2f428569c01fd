"""The HTTP API for readiness flags and heartbeat pings. JSON in, JSON out; every refusal is RFC 9457
problem details (harness_site/api/problems.py), the same document as the REST API's; the codes are
listed in docs/api.md. Bodies are strict JSON (tasks/rules/json_limits.py): no NaN, no NUL, bounded
nesting.

Authentication is the REST API's (harness_site/api/tokens.py): `Authorization: Bearer <token>` (an
ApiToken, acting with its user's permissions within its scopes: flags:read to list, flags:write to
set, clear and ping) or a Django session, which must then pass the CSRF check like any form post.
Permissions: tasks.view_readinessflag to list, tasks.add_readinessflag to set,
tasks.delete_readinessflag to clear, tasks.send_ping to ping a heartbeat rule.
"""

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from harness_site.api.base import DeskView, body_object, query_text
from harness_site.api.problems import ApiProblem, invalid
from tasks.flags import FlagError, flag_clear, flag_json, flag_list, flag_set
from tasks.models import TriggerRule
from tasks.triggers.heartbeat import rule_ping


class FlagView(DeskView):
    scope_area = "flags"


# Documented in docs/evaluation.md, outside the /api/v1 schema.
@extend_schema(exclude=True)
class FlagListView(FlagView):
    perms = {"GET": ("tasks.view_readinessflag",)}

    def get(self, request):
        name, scope = query_text(request, "name"), query_text(request, "scope")
        try:
            flags = flag_list(name=name or None, scope=scope or None)
        except FlagError as exc:
            raise invalid(exc.field, str(exc)) from None
        return Response({"ok": True, "flags": [flag_json(f) for f in flags]})


@extend_schema(exclude=True)
class FlagSetView(FlagView):
    perms = {"POST": ("tasks.add_readinessflag",)}

    def post(self, request):
        data = body_object(request)
        try:
            flag, created = flag_set(
                name=data.get("name"),
                scope=data.get("scope"),
                note=data.get("note", ""),
                actor=request.user.get_username(),
                now=timezone.now(),
            )
        except FlagError as exc:
            raise invalid(exc.field, str(exc)) from None
        return Response({"ok": True, "created": created, "flag": flag_json(flag)}, status=201 if created else 200)


@extend_schema(exclude=True)
class FlagClearView(FlagView):
    perms = {"POST": ("tasks.delete_readinessflag",)}

    def post(self, request):
        data = body_object(request)
        try:
            cleared = flag_clear(name=data.get("name"), scope=data.get("scope"), actor=request.user.get_username())
        except FlagError as exc:
            raise invalid(exc.field, str(exc)) from None
        return Response({"ok": True, "cleared": cleared})


@extend_schema(exclude=True)
class RulePingView(FlagView):
    perms = {"POST": ("tasks.send_ping",)}

    def post(self, request, rule: str):
        body_object(request)  # a body, if any, must be a JSON object like every other POST's
        # A name with a NUL cannot be a rule's, and PostgreSQL refuses it in a query.
        found = None if "\x00" in rule else TriggerRule.objects.filter(name=rule).first()
        if found is None:
            raise ApiProblem(404, "unknown-rule", f"no rule named {rule[:200]!r}", field="rule")
        try:
            deadline = rule_ping(rule=found, now=timezone.now())
        except ValueError as exc:
            raise ApiProblem(400, "not-a-heartbeat-rule", str(exc), field="rule") from None
        return Response({"ok": True, "rule": found.name, "fires_if_silent_until": deadline.isoformat()})
