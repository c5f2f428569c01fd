"""The status board as data: every rule worst first with its health, last outcome, open tickets,
next fire, and the slots missed and decided in the last 24 h (runs/desk/status.py, the admin's landing page)."""

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from harness_site.api.base import COMMON, DeskView, problems, query_choice, query_text
from harness_site.api.problems import invalid
from runs.desk import status


class LastOutcomeSerializer(serializers.Serializer):
    kind = serializers.CharField(help_text="run or decision")
    state = serializers.CharField(required=False, help_text="the run's state (kind run)")
    reason = serializers.CharField(required=False, help_text="the decision's reason (kind decision)")
    at = serializers.DateTimeField(help_text="the slot, or the trigger instant of a run without one")
    run_id = serializers.IntegerField(required=False)
    decision_id = serializers.IntegerField(required=False)


class StatusRowSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    enabled = serializers.BooleanField()
    kind = serializers.CharField()
    timezone = serializers.CharField()
    next_fire_at = serializers.DateTimeField(allow_null=True)
    health = serializers.ChoiceField(choices=status.HEALTH_ORDER)
    last = LastOutcomeSerializer(allow_null=True)
    open_tickets = serializers.IntegerField()
    missed_24h = serializers.IntegerField(help_text="slots missed beyond the catch-up window or its max count")
    decided_24h = serializers.DictField(child=serializers.IntegerField(), help_text="decisions by reason")


class StatusSerializer(serializers.Serializer):
    now = serializers.DateTimeField()
    total = serializers.IntegerField(help_text="rules matching the filter and the search")
    counts = serializers.DictField(child=serializers.IntegerField(), help_text="rules by health, before the filter")
    missed_24h = serializers.IntegerField()
    decided_24h = serializers.DictField(child=serializers.IntegerField())
    page = serializers.IntegerField()
    pages = serializers.IntegerField()
    rules = StatusRowSerializer(many=True)


@extend_schema(tags=["rules"])
class StatusView(DeskView):
    scope_area = "rules"
    perms = {"GET": ("tasks.view_triggerrule", "runs.view_taskrun", "deadletters.view_deadletter")}

    @extend_schema(
        operation_id="status_get",
        parameters=[
            OpenApiParameter("health", str, enum=list(status.HEALTH_ORDER)),
            OpenApiParameter("q", str, description="part of a rule name"),
            OpenApiParameter("page", int, description=f"{status.PAGE_ROWS} rules a page, from 1"),
        ],
        responses={200: StatusSerializer, **problems(*COMMON)},
        description="Every rule worst first (failing, overdue, missed slots, ok, no outcome yet, paused), "
        "with the slots missed and decided without a run in the last 24 h.",
    )
    def get(self, request):
        health = query_choice(request, "health", [(h, h) for h in status.HEALTH_ORDER])
        page = query_text(request, "page")
        if page and not (page.isascii() and page.isdigit() and 0 < len(page) <= 6 and int(page) > 0):
            raise invalid("page", "a whole number from 1")
        b = status.board_build(now=timezone.now(), health=health, q=query_text(request, "q"), page=int(page or 1))
        rows = [
            {
                "id": r.id,
                "name": r.name,
                "enabled": r.enabled,
                "kind": r.kind,
                "timezone": r.timezone,
                "next_fire_at": r.next_fire_at,
                "health": r.health,
                "last": {k: v for k, v in r.last.items() if k != "label"} if r.last else None,
                "open_tickets": r.open_tickets,
                "missed_24h": r.missed_24h,
                "decided_24h": r.decided_24h,
            }
            for r in b.rows
        ]
        body = {
            "now": b.now,
            "total": b.total,
            "counts": b.counts,
            "missed_24h": b.missed_24h,
            "decided_24h": b.decided_24h,
            "page": b.page,
            "pages": b.pages,
            "rules": rows,
        }
        return Response(StatusSerializer(body).data)
