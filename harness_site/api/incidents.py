"""Incidents of the harness itself (runs/engine/incidents.py): list, newest first, and one with what it cost.
Read-only: incidents are opened and closed by the alerts pass and the scheduler tick."""

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from harness_site.api.base import COMMON, DeskView, ascii_number, problems, query_choice
from harness_site.api.problems import ApiProblem
from harness_site.api.runs import Cursor, paginated
from runs.engine.incidents import incident_actions, incident_cost, incident_link, incident_missed
from runs.models import Incident

VIEW = ("runs.view_incident",)
INCIDENT_ID = OpenApiParameter("incident_id", int, OpenApiParameter.PATH, description="the incident's id")


class IncidentSerializer(serializers.ModelSerializer):
    duration_seconds = serializers.SerializerMethodField(help_text="until now while it is open")
    link = serializers.SerializerMethodField(help_text="its page on the desk")

    class Meta:
        model = Incident
        fields: tuple[str, ...] = (
            "id",
            "kind",
            "subject",
            "started_at",
            "detected_at",
            "ended_at",
            "duration_seconds",
            "detail",
        )
        fields += ("link",)

    def get_duration_seconds(self, incident: Incident) -> float:
        return ((incident.ended_at or timezone.now()) - incident.started_at).total_seconds()

    def get_link(self, incident: Incident) -> str:
        return incident_link(incident)


class RuleCostSerializer(serializers.Serializer):
    rule = serializers.CharField()
    missed = serializers.IntegerField(help_text="slots missed, superseded or beyond the catch-up count")
    caught_up = serializers.IntegerField(help_text="slots run late, by the catch-up")
    other = serializers.IntegerField(help_text="slots decided otherwise (calendar, window, paused, ...)")


class MissedSlotSerializer(serializers.Serializer):
    decision_id = serializers.IntegerField()
    rule = serializers.CharField()
    slot = serializers.DateTimeField()
    reason = serializers.CharField()


class ActionSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    actor = serializers.CharField()
    action = serializers.CharField()
    target_type = serializers.CharField()
    target_id = serializers.CharField()


class IncidentDetailSerializer(serializers.Serializer):
    """The schema of one incident: the list's fields and what it cost."""

    id = serializers.IntegerField()
    kind = serializers.CharField(help_text=", ".join(Incident.Kind.values))
    subject = serializers.CharField(help_text='"scheduler", or the queue\'s name')
    started_at = serializers.DateTimeField()
    detected_at = serializers.DateTimeField()
    ended_at = serializers.DateTimeField(allow_null=True, help_text="null while it is open")
    duration_seconds = serializers.FloatField(help_text="until now while it is open")
    detail = serializers.CharField()
    link = serializers.CharField(help_text="its page on the desk")
    missed = serializers.IntegerField()
    caught_up = serializers.IntegerField()
    alerts = serializers.IntegerField(help_text="alerts recorded during it")
    rules = RuleCostSerializer(many=True)
    missed_slots = MissedSlotSerializer(many=True, help_text="oldest first, at most 500")
    actions = ActionSerializer(many=True, help_text="operator actions from its start to an hour after its end")


@extend_schema(tags=["incidents"])
class IncidentListView(DeskView):
    scope_area = "runs"
    perms = {"GET": VIEW}

    @extend_schema(
        operation_id="incidents_list",
        parameters=[
            OpenApiParameter("kind", str, enum=Incident.Kind.values),
            OpenApiParameter("open", bool, description="true: only those still open"),
            OpenApiParameter("cursor", str),
            OpenApiParameter("limit", int, description="1 to 200; default 50"),
        ],
        responses={200: paginated("PaginatedIncidents", IncidentSerializer), **problems(*COMMON)},
    )
    def get(self, request):
        found = Incident.objects.all()
        kind = query_choice(request, "kind", Incident.Kind.choices)
        if kind:
            found = found.filter(kind=kind)
        flag = query_choice(request, "open", [("true", "true"), ("false", "false")])
        if flag:
            found = found.filter(ended_at__isnull=flag == "true")
        pager = Cursor()
        page = pager.paginate_queryset(found, request, view=self)
        return pager.get_paginated_response(IncidentSerializer(page, many=True).data)


@extend_schema(tags=["incidents"], parameters=[INCIDENT_ID])
class IncidentDetailView(DeskView):
    scope_area = "runs"
    perms = {"GET": VIEW}

    @extend_schema(operation_id="incidents_get", responses={200: IncidentDetailSerializer, **problems(*COMMON, 404)})
    def get(self, request, incident_id: str):
        number = ascii_number(incident_id)
        incident = Incident.objects.filter(id=number).first() if number is not None else None
        if incident is None:
            raise ApiProblem(404, "unknown-incident", f"no incident with id {str(incident_id)[:30]!r}", field="id")
        now = timezone.now()
        cost = incident_cost(incident, until=incident.ended_at or now)
        body = {
            **IncidentSerializer(incident).data,
            "missed": cost.missed,
            "caught_up": cost.caught_up,
            "alerts": cost.alerts,
            "rules": [
                {"rule": r["name"], **{k: r[k] for k in ("missed", "caught_up", "other")}} for r in cost.rules.values()
            ],
            "missed_slots": [
                {"decision_id": d.id, "rule": d.rule.name, "slot": d.slot, "reason": d.reason}
                for d in incident_missed(incident, now=now)
            ],
            "actions": [
                {
                    "at": a.at,
                    "actor": a.actor,
                    "action": a.action,
                    "target_type": a.target_type,
                    "target_id": a.target_id,
                }
                for a in incident_actions(incident, now=now)
            ],
        }
        return Response(body)
