"""Rules: list, get, create, update (If-Match on the version), pause/resume, delete; run now and
trial; explain and preview. Every decision is a service's: the rules import validates and words
every refusal (tasks.services.rule_import), tasks.triggers.operator acts, tasks.triggers.explain explains."""

import json
import re
from datetime import timedelta

from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import ProtectedError
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from harness_site.api.base import (
    COMMON,
    RULE_NAME,
    DeskView,
    ascii_number,
    body_object,
    problems,
    query_text,
    validated,
)
from harness_site.api.problems import ApiProblem, invalid
from harness_site.api.serializers import (
    ClaimSerializer,
    RequiredReasonSerializer,
    RerunPlanSerializer,
    RerunSerializer,
    RuleCreateSerializer,
    RuleSerializer,
    RuleUpdateSerializer,
    RunNowSerializer,
)
from runs.desk.objectives import objective_filter_rules, objective_status_for_rules
from runs.models import SlotObjective
from tasks import sentences
from tasks.models import TriggerRule
from tasks.rules.preview import FROM_YEARS, StartError, preview_start, rule_preview
from tasks.services import RuleImportError, rule_export_one, rule_import, rule_import_stage
from tasks.triggers import rerun
from tasks.triggers.explain import SlotParseError, parse_slot, slot_explain, trigger_explain
from tasks.triggers.operator import RuleActionError, rule_pause, rule_resume, rule_run_now
from tasks.triggers.plan import plan_json, rule_plan

VIEW = ("tasks.view_triggerrule",)
MAX_PREVIEW = 100


def rule_get(name: str) -> TriggerRule:
    found = None if "\x00" in name else TriggerRule.objects.filter(name=name).first()
    if found is None:
        raise ApiProblem(404, "unknown-rule", f"no rule named {name[:100]!r}", field="name")
    return found


def _etag(rule: TriggerRule) -> str:
    return f'"{rule.version}"'


def rule_response(rule: TriggerRule, *, status: int = 200, headers: dict | None = None) -> Response:
    return Response(RuleSerializer(rule).data, status=status, headers={"ETag": _etag(rule), **(headers or {})})


def import_problems(errors: list[str], label: str) -> ApiProblem:
    """The import's refusals of one rule as problem details, each with its field. The import words
    them "<label> field <f>: <message>" or "<label>: <message>" (tasks/file_items.py)."""
    items = []
    for error in errors:
        rest = error[len(label) :] if error.startswith(label) else error
        found = re.match(r"^ field (\w+): (.*)$", rest, re.S)
        if found:
            items.append({"field": found[1], "detail": found[2]})
        else:
            items.append({"field": "", "detail": rest.removeprefix(": ").removeprefix("file: ")})
    first = items[0] if items else {"field": "", "detail": "invalid rule"}
    detail = "; ".join(f"{i['field']}: {i['detail']}" if i["field"] else i["detail"] for i in items)
    return ApiProblem(400, "invalid-rule", detail, field=first["field"], errors=items)


def _import_one(item: dict, *, now) -> tuple[list[str], list[str]]:
    """Apply one rule through the rules import: (created, updated) names. RuleImportError as problems."""
    name = item.get("name")
    label = f"rule {name!r}" if isinstance(name, str) and name else "rule #1"
    try:
        result = rule_import(json.dumps({"rules": [item]}), now=now)
    except RuleImportError as exc:
        raise import_problems(exc.errors, label) from None
    return result.created, result.updated


def _if_match(request, rule: TriggerRule, *, required: bool) -> None:
    header = request.headers.get("If-Match", "").strip()
    if not header:
        if required:
            raise ApiProblem(
                428,
                "if-match-required",
                f'send If-Match with the rule\'s ETag (its version), e.g. If-Match: "{rule.version}"',
                field="If-Match",
            )
        return
    if header == "*":
        return
    wanted = [t.strip().removeprefix("W/").strip('"') for t in header.split(",")]
    if str(rule.version) not in wanted:
        raise ApiProblem(
            412,
            "version-mismatch",
            f"the rule is version {rule.version}, not {header}: read it again, then apply your change",
            field="If-Match",
            current_version=rule.version,
        )


@extend_schema(tags=["rules"])
class RuleListView(DeskView):
    scope_area = "rules"
    perms = {"GET": VIEW, "POST": ("tasks.add_triggerrule",)}

    @extend_schema(
        operation_id="rules_list",
        parameters=[
            OpenApiParameter("kind", str, enum=[c for c, _ in TriggerRule.Kind.choices]),
            OpenApiParameter("enabled", bool),
            OpenApiParameter("q", str, description="name contains"),
            OpenApiParameter(
                "objective",
                str,
                enum=list(SlotObjective.Status.values),
                description="rules whose freshness objective status is this now",
            ),
        ],
        responses={200: RuleSerializer(many=True), **problems(*COMMON)},
    )
    def get(self, request):
        rules = (
            TriggerRule.objects.select_related("agent", "identity", "business_calendar")
            .prefetch_related("pools")
            .order_by("name")
        )
        kind = query_text(request, "kind")
        if kind:
            if kind not in TriggerRule.Kind.values:
                raise invalid("kind", f"{kind!r} is not one of {', '.join(TriggerRule.Kind.values)}")
            rules = rules.filter(kind=kind)
        enabled = query_text(request, "enabled").lower()
        if enabled:
            if enabled not in ("true", "false"):
                raise invalid("enabled", "true or false")
            rules = rules.filter(enabled=enabled == "true")
        q = query_text(request, "q")
        if q:
            rules = rules.filter(name__icontains=q)
        objective = query_text(request, "objective")
        if objective:
            if objective not in SlotObjective.Status.values:
                raise invalid("objective", f"{objective!r} is not one of {', '.join(SlotObjective.Status.values)}")
            rules = objective_filter_rules(rules, objective)
        listed = list(rules)
        found = objective_status_for_rules([r.id for r in listed if r.objective])
        return Response(RuleSerializer(listed, many=True, context={"objectives": found}).data)

    @extend_schema(
        operation_id="rules_create",
        request=RuleCreateSerializer,
        responses={201: RuleSerializer, **problems(*COMMON, 409)},
        description="Create a rule. Checked exactly as `rules import` checks a file, with the same messages.",
    )
    def post(self, request):
        item = body_object(request)
        name = item.get("name")
        if isinstance(name, str) and TriggerRule.objects.filter(name=name).exists():
            raise ApiProblem(409, "rule-exists", f"a rule named {name!r} exists: PATCH it instead", field="name")
        with transaction.atomic():
            created, _updated = _import_one(dict(item), now=timezone.now())
            if not created:  # created meanwhile by someone else: leave theirs alone
                transaction.set_rollback(True)
                raise ApiProblem(409, "rule-exists", f"a rule named {name!r} exists: PATCH it instead", field="name")
        rule = rule_get(created[0])
        return rule_response(rule, status=201, headers={"Location": f"/api/v1/rules/{rule.name}"})


@extend_schema(tags=["rules"], parameters=[RULE_NAME])
class RuleDetailView(DeskView):
    scope_area = "rules"
    perms = {"GET": VIEW, "PATCH": ("tasks.change_triggerrule",), "DELETE": ("tasks.delete_triggerrule",)}

    @extend_schema(operation_id="rules_get", responses={200: RuleSerializer, **problems(401, 403, 404)})
    def get(self, request, name: str):
        return rule_response(rule_get(name))

    @extend_schema(
        operation_id="rules_update",
        request=RuleUpdateSerializer,
        parameters=[
            OpenApiParameter(
                "If-Match", str, OpenApiParameter.HEADER, required=True, description='The ETag read, e.g. "3"'
            )
        ],
        responses={200: RuleSerializer, **problems(*COMMON, 404, 412, 428)},
        description="Change the given fields only. Optimistic concurrency: If-Match must carry the current "
        "ETag (the rule's version); an edit made meanwhile gives 412 and changes nothing.",
    )
    def patch(self, request, name: str):
        changes = body_object(request)
        rule = rule_get(name)
        if "name" in changes and changes["name"] != rule.name:
            raise invalid("name", "a rule is renamed in the admin, not through the API")
        with transaction.atomic():
            # Locked, so the version checked is the version changed (SQLite: the write lock is taken up front).
            locked = TriggerRule.objects.select_for_update().get(pk=rule.pk)
            _if_match(request, locked, required=True)
            # The rule as exported, with the changes laid over it: the import checks the whole rule.
            _import_one({**rule_export_one(locked), **changes, "name": locked.name}, now=timezone.now())
        return rule_response(rule_get(rule.name))

    @extend_schema(
        operation_id="rules_delete",
        parameters=[OpenApiParameter("If-Match", str, OpenApiParameter.HEADER, description="Optional ETag check")],
        responses={204: None, **problems(401, 403, 404, 409, 412)},
    )
    def delete(self, request, name: str):
        rule = rule_get(name)
        try:
            with transaction.atomic():
                locked = TriggerRule.objects.select_for_update().get(pk=rule.pk)
                _if_match(request, locked, required=False)
                locked.delete()
        except (ProtectedError, IntegrityError, DatabaseError) as exc:
            raise ApiProblem(409, "rule-in-use", f"the rule cannot be deleted: {exc}") from None
        return Response(status=204)


class _RuleActionView(DeskView):
    scope_area = "rules"


def _action_error(exc: RuleActionError) -> ApiProblem:
    return ApiProblem(400, "refused", str(exc), field=exc.field or "")


@extend_schema(tags=["rules"], parameters=[RULE_NAME])
class RulePauseView(_RuleActionView):
    perms = {"POST": ("tasks.pause_rule",)}
    enabled_after = False

    @extend_schema(
        request=RequiredReasonSerializer,
        responses={200: RuleSerializer, **problems(*COMMON, 404, 409)},
        description="Pause (or resume) with a reason, as the admin's Pause/Resume button.",
    )
    def post(self, request, name: str):
        rule = rule_get(name)
        data = body_object(request)
        reason = data.get("reason", "")
        if not isinstance(reason, str):
            raise invalid("reason", "a string")
        if rule.enabled == self.enabled_after:
            state = "running" if rule.enabled else "paused"
            raise ApiProblem(409, "already-" + state, f"{rule.name} is {state} already", field="")
        service = rule_resume if self.enabled_after else rule_pause
        try:
            service(rule=rule, actor=request.user, now=timezone.now(), reason=reason)
        except RuleActionError as exc:
            raise _action_error(exc) from None
        return rule_response(rule_get(name))


class RuleResumeView(RulePauseView):
    enabled_after = True


@extend_schema(tags=["rules"], parameters=[RULE_NAME])
class RuleRunNowView(_RuleActionView):
    perms = {"POST": ("tasks.run_rule_now",)}
    trial = False

    @extend_schema(
        request=RunNowSerializer,
        responses={201: ClaimSerializer, 200: ClaimSerializer, **problems(*COMMON, 404)},
        description="A real run for a slot or business key, claimed like any trigger: a repeat is a dedupe "
        "hit (200, created false). Trial runs get their own keys.",
    )
    def post(self, request, name: str):
        rule = rule_get(name)
        data = validated(RunNowSerializer, request)
        slot_text, biz_key = data.get("slot", ""), data.get("biz_key", "")
        if slot_text and biz_key:
            raise invalid("slot", "Give a slot or a business key, not both.")
        if len(biz_key) > 255:
            raise invalid("biz_key", "at most 255 characters")
        slot = None
        if slot_text:
            try:
                slot = parse_slot(slot_text, rule=rule)
            except SlotParseError as exc:
                raise invalid("slot", str(exc)) from None
        try:
            claim = rule_run_now(
                rule=rule,
                actor=request.user,
                now=timezone.now(),
                slot=slot,
                biz_key=biz_key,
                reason=data.get("reason", ""),
                trial=self.trial,
            )
        except RuleActionError as exc:
            raise _action_error(exc) from None
        body = ClaimSerializer({"created": claim.created, "run": claim.run}).data
        return Response(body, status=201 if claim.created else 200)


class RuleTrialView(RuleRunNowView):
    perms = {"POST": ("tasks.trial_run_rule",)}
    trial = True


@extend_schema(tags=["rules"], parameters=[RULE_NAME])
class RuleRerunView(_RuleActionView):
    perms = {"POST": ("runs.rerun_slots",)}

    @extend_schema(
        operation_id="rules_rerun",
        request=RerunSerializer,
        responses={200: RerunPlanSerializer, 201: RerunPlanSerializer, **problems(*COMMON, 404, 409)},
        description="Re-run chosen slots of the rule (missed ones, after an outage): exactly those, each with "
        "the business key its slot always had, deduped, paced and approved like a backfill, audited. "
        "dry_run true (the default) answers with the plan and creates nothing; dry_run false claims it "
        "(201), held to `expect` when given. A slot whose key already has a run is refused with the run; a "
        "failed run is replayed on its run (POST /runs/{id}/retry), never run twice.",
    )
    def post(self, request, name: str):
        rule = rule_get(name)
        data = validated(RerunSerializer, request)
        slots = []
        for n, text in enumerate(data["slots"]):
            try:
                slots.append(parse_slot(text, rule=rule))
            except SlotParseError as exc:
                raise invalid(f"slots.{n}", str(exc)) from None
        spacing = timedelta(seconds=data["spacing_seconds"])
        now = timezone.now()
        try:
            plan = rerun.rule_slots_rerun_plan(rule=rule, slots=slots, now=now, spacing=spacing)
            if data["dry_run"]:
                return Response(_rerun_body(rule, plan, dry_run=True))
            done = rerun.slots_rerun(
                rule=rule,
                slots=slots,
                confirmed=data.get("expect", plan.signature),
                spacing=spacing,
                actor=request.user,
                now=now,
                reason=data["reason"],
            )
        except rerun.RerunStale as exc:
            raise ApiProblem(409, "plan-changed", str(exc), field="expect") from None
        except RuleActionError as exc:
            raise _action_error(exc) from None
        return Response({**_rerun_body(rule, plan, dry_run=False), **done}, status=201)


def _rerun_body(rule: TriggerRule, plan: rerun.RerunPlan, *, dry_run: bool) -> dict:
    items = [
        {
            "slot": i.slot,
            "biz_key": i.biz_key,
            "reason": i.reason,
            "runs": not i.refused,
            "refused": i.refused,
            "run_id": i.run_id,
            "run_state": i.run_state,
            "run_url": f"/api/v1/runs/{i.run_id}" if i.run_id else None,
        }
        for i in plan.items
    ]
    body = {
        "rule": rule.name,
        "dry_run": dry_run,
        "planned_at": plan.planned_at,
        "spacing_seconds": int(plan.spacing.total_seconds()),
        "to_run": len(plan.to_run),
        "signature": plan.signature,
        "items": items,
    }
    return RerunPlanSerializer(body).data


@extend_schema(tags=["rules"], parameters=[RULE_NAME])
class RuleExplainView(_RuleActionView):
    perms = {"GET": VIEW}

    @extend_schema(
        parameters=[
            OpenApiParameter("slot", str, description="ISO 8601; without an offset read in the rule's timezone"),
            OpenApiParameter("biz_key", str, description="a trigger by its business key"),
        ],
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT), **problems(*COMMON, 404)},
        description="Why did or didn't the rule run at a slot (or for a business key)? As `harness explain`.",
    )
    def get(self, request, name: str):
        rule = rule_get(name)
        slot_text, biz_key = query_text(request, "slot").strip(), query_text(request, "biz_key").strip()
        now = timezone.now()
        if biz_key:
            return Response(trigger_explain(rule=rule, biz_key=biz_key, now=now))
        if not slot_text:
            raise invalid("slot", "give slot (or biz_key)")
        if rule.kind == TriggerRule.Kind.EVENT:
            raise invalid("slot", "an event rule has no slots; explain one of its triggers by biz_key")
        try:
            return Response(slot_explain(rule=rule, slot=parse_slot(slot_text, rule=rule), now=now))
        except SlotParseError as exc:
            raise invalid("slot", str(exc)) from None


class PreviewRowSerializer(serializers.Serializer):
    utc = serializers.DateTimeField()
    local = serializers.DateTimeField()
    note = serializers.CharField(allow_blank=True)
    guards = serializers.CharField(allow_blank=True)


@extend_schema(tags=["rules"], parameters=[RULE_NAME])
class RulePreviewView(_RuleActionView):
    perms = {"GET": VIEW}

    @extend_schema(
        parameters=[
            OpenApiParameter("count", int, description=f"1 to {MAX_PREVIEW}; default 10"),
            OpenApiParameter(
                "from",
                OpenApiTypes.DATE,
                description="start on this day (YYYY-MM-DD, in the rule's timezone), e.g. a coming Spring "
                f"Festival; years {FROM_YEARS[0]} to {FROM_YEARS[1]}; default: now",
            ),
        ],
        responses={200: PreviewRowSerializer(many=True), **problems(*COMMON, 404)},
        description="The next fires with DST notes and what the windows and calendar do to each.",
    )
    def get(self, request, name: str):
        rule = rule_get(name)
        count = ascii_number(query_text(request, "count") or "10")
        if count is None or not 1 <= count <= MAX_PREVIEW:
            raise invalid("count", f"a whole number from 1 to {MAX_PREVIEW}, in ASCII digits")
        if rule.kind == TriggerRule.Kind.EVENT:
            return Response([])
        now = timezone.now()
        at, start = now, query_text(request, "from")
        try:
            if start:
                at = preview_start(start, timezone=rule.timezone)
            fires = rule_preview(rule, at=at, count=count, now=now).fires
        except StartError as exc:
            raise invalid("from", sentences.say(exc.reason)) from None
        except ValueError as exc:  # a rule saved without its checks (shell, old data): say so, never a 500
            raise ApiProblem(409, "invalid-rule", f"cannot preview the rule: {exc}") from None
        return Response(
            [
                {
                    "utc": f.utc,
                    "local": f.local,
                    "note": sentences.say(f.note),
                    "guards": sentences.say(f.guards),
                    "start": sentences.say(f.start),
                }
                for f in fires
            ]
        )


MAX_PLAN_DAYS = 60
PLAN_ROWS = 500


@extend_schema(tags=["rules"], parameters=[RULE_NAME])
class RulePlanView(_RuleActionView):
    perms = {"POST": ("tasks.change_triggerrule",)}

    @extend_schema(
        operation_id="rules_plan",
        parameters=[OpenApiParameter("days", int, description=f"days replayed and previewed, 1 to {MAX_PLAN_DAYS}")],
        request=RuleUpdateSerializer,
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT), **problems(*COMMON)},
        description="The plan of a change, saving nothing: for an existing rule the body holds the fields to "
        "change (as PATCH); for a name no rule has, the whole rule (as POST /rules), a plan on create. The "
        "answer: the field-by-field diff, the last days replayed slot by slot (the differing slots listed) "
        "beside what was recorded, the next fires of both with the first day they differ, and the "
        "consequences (`dangerous`: a catch-up burst, a key of another shape, a changed identity or agent).",
    )
    def post(self, request, name: str):
        changes = body_object(request)
        days = ascii_number(query_text(request, "days") or "14")
        if days is None or not 1 <= days <= MAX_PLAN_DAYS:
            raise invalid("days", f"a whole number from 1 to {MAX_PLAN_DAYS}, in ASCII digits")
        existing = None if "\x00" in name else TriggerRule.objects.filter(name=name).first()
        if existing is not None and "name" in changes and changes["name"] != existing.name:
            raise invalid("name", "a rule is renamed in the admin, not through the API")
        item = {**rule_export_one(existing), **changes} if existing is not None else dict(changes)
        item["name"] = name
        label = f"rule {name!r}"
        try:
            staged = rule_import_stage(json.dumps({"rules": [item]}))
        except RuleImportError as exc:
            raise import_problems(exc.errors, label) from None
        rule, _created, _changed, rule_pools = staged.rules[0]
        pools = [p.name for p in rule_pools] if rule_pools is not None else None
        try:
            plan = rule_plan(existing, rule, now=timezone.now(), days=days, new_pools=pools)
        except ValueError as exc:  # a stored rule saved without its checks (shell, old data): say so
            raise ApiProblem(409, "invalid-rule", f"cannot plan the rule: {exc}") from None
        body = {"name": name, "created": existing is None, **plan_json(plan, zone=rule.timezone, rows=PLAN_ROWS)}
        return Response(body)
