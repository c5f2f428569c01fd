"""Runs: list (the admin's filters, cursor pagination), get (attempts, decisions, tickets), delayed
one-time runs (POST /runs: tasks.triggers.once.schedule_once), retry now and cancel
(runs.engine.operations, the admin's own services)."""

from django.utils import timezone
from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import exceptions, pagination, serializers
from rest_framework.response import Response

from harness_site.api.base import (
    COMMON,
    RUN_ID,
    DeskView,
    ascii_number,
    body_object,
    problems,
    query_bool,
    query_choice,
    query_instant,
    query_text,
    validated,
)
from harness_site.api.idempotency import idempotency_check, request_fingerprint
from harness_site.api.problems import ApiProblem, invalid
from harness_site.api.serializers import (
    ClaimSerializer,
    ReasonSerializer,
    RunDetailSerializer,
    RunSerializer,
    ScheduleOnceSerializer,
)
from runs.desk.key_search import key_search
from runs.desk.selectors import run_timeline
from runs.engine.operations import OperationError, run_cancel, run_retry_now
from runs.models import TaskRun
from tasks.models import TriggerRule
from tasks.triggers.once import OnceError, schedule_once

VIEW = ("runs.view_taskrun",)


class Cursor(pagination.CursorPagination):
    """Newest first by id: stable under inserts, whatever the table size (no OFFSET)."""

    ordering = "-id"
    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 200

    def decode_cursor(self, request):
        try:
            return super().decode_cursor(request)
        except exceptions.NotFound:
            raise invalid("cursor", "not a cursor this API gave out; start again without it") from None

    def get_page_size(self, request):
        text = request.query_params.get(self.page_size_query_param, "")
        if text and not 1 <= (ascii_number(text) or 0) <= self.max_page_size:
            raise invalid("limit", f"a whole number from 1 to {self.max_page_size}")
        return super().get_page_size(request)


def paginated(name: str, item) -> serializers.Serializer:
    return inline_serializer(
        name,
        {
            "next": serializers.CharField(allow_null=True, help_text="the next page's URL; null on the last"),
            "previous": serializers.CharField(allow_null=True),
            "results": item(many=True),
        },
    )


def run_get(run_id) -> TaskRun:
    number = ascii_number(run_id)
    found = TaskRun.objects.filter(id=number).first() if number is not None else None
    if found is None:
        raise ApiProblem(404, "unknown-run", f"no run with id {str(run_id)[:30]!r}", field="id")
    return found


def run_detail(run: TaskRun) -> dict:
    """The run page's data (runs.desk.selectors.run_timeline): attempts, decisions and tickets."""
    timeline = run_timeline(run, now=timezone.now())
    # Set on the instance as a queryset annotation would be: the serializer reads them as attributes.
    vars(run).update(
        attempt_list=[row["a"] for row in timeline["attempts"]],
        decisions=timeline["decisions"],
        tickets=timeline["tickets"],
    )
    return RunDetailSerializer(run).data


RUN_FILTERS = [
    OpenApiParameter("state", str, enum=TaskRun.State.values),
    OpenApiParameter("source", str, enum=TaskRun.Source.values),
    OpenApiParameter("rule", str, description="rule name (kept after a rule is deleted)"),
    OpenApiParameter("error_kind", str, description="last error kind"),
    OpenApiParameter("trial", bool),
    OpenApiParameter("triggered_after", str, description="ISO 8601 instant"),
    OpenApiParameter("triggered_before", str, description="ISO 8601 instant"),
    OpenApiParameter(
        "q",
        str,
        description="a biz_key as stored or as the client sent it (`callback:order-7` finds the key stored as "
        "`…/callback%3Aorder-7`), part of one, or a run id",
    ),
    OpenApiParameter("cursor", str),
    OpenApiParameter("limit", int, description="1 to 200; default 50"),
]


@extend_schema(tags=["runs"])
class RunListView(DeskView):
    scope_area = "runs"
    # A delayed run of a rule is the operator's "run now" at a later instant; of a bare skill, a rule
    # of one run: it needs the right to create rules too (its skill runs with no identity).
    perms = {"GET": VIEW, "POST": ("tasks.run_rule_now",)}

    def required_perms_for(self, request):
        if request.method == "POST" and isinstance(request.data, dict) and not request.data.get("rule"):
            return ("tasks.run_rule_now", "tasks.add_triggerrule")
        return super().required_perms_for(request)

    @extend_schema(
        operation_id="runs_list",
        parameters=RUN_FILTERS,
        responses={200: paginated("PaginatedRuns", RunSerializer), **problems(*COMMON)},
        description="The admin's run list filters; newest first, cursor-paginated (follow `next`).",
    )
    def get(self, request):
        runs = TaskRun.objects.all()
        state = query_choice(request, "state", TaskRun.State.choices)
        if state:
            runs = runs.filter(state=state)
        source = query_choice(request, "source", TaskRun.Source.choices)
        if source:
            runs = runs.filter(source=source)
        for param, column in (("rule", "rule_name"), ("error_kind", "last_error_kind")):
            value = query_text(request, param)
            if value:
                runs = runs.filter(**{column: value})
        trial = query_bool(request, "trial")
        if trial is not None:
            runs = runs.filter(is_trial=trial)
        after, before = query_instant(request, "triggered_after"), query_instant(request, "triggered_before")
        if after:
            runs = runs.filter(trigger_at__gte=after)
        if before:
            runs = runs.filter(trigger_at__lt=before)
        q = query_text(request, "q")
        if q:
            # A whole key, stored or as the client sent it (`callback:order-7`), else part of one.
            by_key, _whole = key_search(runs, q)
            as_id = ascii_number(q)
            runs = by_key | runs.filter(id=as_id) if as_id is not None else by_key
        pager = Cursor()
        page = pager.paginate_queryset(runs, request, view=self)
        return pager.get_paginated_response(RunSerializer(page, many=True).data)

    @extend_schema(
        operation_id="runs_schedule_once",
        request=ScheduleOnceSerializer,
        responses={201: ClaimSerializer, 200: ClaimSerializer, **problems(*COMMON, 404, 409)},
        description="A delayed one-time run, kept in the database as a pending run due at run_at (or after "
        "delay_seconds). The idempotency key becomes its biz_key: a repeat of the same request returns the "
        "same run (200, created false); the same key with another body is refused (409, "
        "idempotency-key-reused). Cancel it with POST /runs/{id}/cancel or in the admin.",
    )
    def post(self, request):
        data = validated(ScheduleOnceSerializer, request)
        fingerprint = request_fingerprint(body_object(request))
        rule = None
        if data.get("rule"):
            rule = TriggerRule.objects.filter(name=data["rule"]).first() if "\x00" not in data["rule"] else None
            if rule is None:
                raise invalid("rule", f"no rule named {data['rule'][:100]!r}")
        run_at = None
        if data.get("run_at"):
            try:
                run_at = parse_datetime(data["run_at"])
            except ValueError:
                run_at = None
            if run_at is None:
                raise invalid(
                    "run_at", f"{data['run_at']!r} is not an ISO 8601 date-time, e.g. 2026-12-01T09:00:00+08:00"
                )
        try:
            claim = schedule_once(
                idempotency_key=data["idempotency_key"],
                actor=request.user,
                now=timezone.now(),
                rule=rule,
                skill=data.get("skill"),
                params=data.get("params"),
                run_at=run_at,
                timezone=data.get("timezone") or None,
                delay_seconds=data.get("delay_seconds"),
                reason=data.get("reason", ""),
                fingerprint=fingerprint,
            )
        except OnceError as exc:
            raise invalid(exc.field, str(exc)) from None
        run = claim.run
        if run is None:  # shed: backpressure never sheds one-time input, so a claim here always has its run
            raise ApiProblem(503, "shed", "the harness is shedding work; try again later")
        if not claim.created:
            idempotency_check(key=data["idempotency_key"], fingerprint=fingerprint, payload=run.payload)
        body = ClaimSerializer({"created": claim.created, "run": run}).data
        return Response(body, status=201 if claim.created else 200, headers={"Location": f"/api/v1/runs/{run.id}"})


@extend_schema(tags=["runs"], parameters=[RUN_ID])
class RunDetailView(DeskView):
    scope_area = "runs"
    perms = {"GET": VIEW}

    @extend_schema(operation_id="runs_get", responses={200: RunDetailSerializer, **problems(401, 403, 404)})
    def get(self, request, run_id: int):
        return Response(run_detail(run_get(run_id)))


@extend_schema(tags=["runs"], parameters=[RUN_ID])
class RunRetryView(DeskView):
    scope_area = "runs"
    perms = {"POST": ("runs.retry_run",)}

    @extend_schema(
        operation_id="runs_retry",
        request=ReasonSerializer,
        responses={200: RunDetailSerializer, **problems(*COMMON, 404, 409)},
        description="Make a waiting or failed run due now, with its biz_key (a failed run's ticket is marked "
        "replayed). 409 when the run is in no retryable state.",
    )
    def post(self, request, run_id: int):
        run = run_get(run_id)
        data = validated(ReasonSerializer, request)
        try:
            done = run_retry_now(run_id=run.id, actor=request.user, now=timezone.now(), reason=data["reason"])
        except OperationError as exc:
            raise ApiProblem(409, "refused", str(exc)) from None
        if not done:
            run.refresh_from_db()
            raise ApiProblem(409, "not-retryable", f"run {run.id} is {run.state}: only waiting or failed runs retry")
        return Response(run_detail(run_get(run.id)))


@extend_schema(tags=["runs"], parameters=[RUN_ID])
class RunCancelView(DeskView):
    scope_area = "runs"
    perms = {"POST": ("runs.cancel_run",)}

    @extend_schema(
        operation_id="runs_cancel",
        request=ReasonSerializer,
        responses={200: RunDetailSerializer, **problems(*COMMON, 404, 409)},
        description="Cancel a run that has not started or waits to retry (a delayed run too).",
    )
    def post(self, request, run_id: int):
        run = run_get(run_id)
        data = validated(ReasonSerializer, request)
        if not run_cancel(run_id=run.id, actor=request.user, now=timezone.now(), reason=data["reason"]):
            run.refresh_from_db()
            raise ApiProblem(
                409, "not-cancellable", f"run {run.id} is {run.state}: only pending or waiting runs cancel"
            )
        return Response(run_detail(run_get(run.id)))
