"""Dead letters: list and find by biz_key, get, replay with the original biz_key (the one replay,
runs.engine.operations.run_retry_now), close with a note, assign (deadletters.services)."""

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from deadletters.models import DeadLetter
from deadletters.services import DeadLetterError, deadletter_assign, deadletter_close
from harness_site.api.base import (
    COMMON,
    TICKET_ID,
    DeskView,
    ascii_number,
    problems,
    query_choice,
    query_text,
    validated,
)
from harness_site.api.problems import ApiProblem, invalid
from harness_site.api.runs import Cursor, paginated
from harness_site.api.serializers import (
    AssignSerializer,
    CloseSerializer,
    DeadLetterSerializer,
    ReasonSerializer,
    ReplaySerializer,
    staff_user,
)
from runs.engine.operations import OperationError, run_retry_now
from tasks.rules.keys import search_candidates

VIEW = ("deadletters.view_deadletter",)


def ticket_get(ticket_id) -> DeadLetter:
    number = ascii_number(ticket_id)
    found = DeadLetter.objects.select_related("owner").filter(id=number).first() if number is not None else None
    if found is None:
        raise ApiProblem(404, "unknown-ticket", f"no dead-letter ticket with id {str(ticket_id)[:30]!r}", field="id")
    return found


@extend_schema(tags=["deadletters"])
class DeadLetterListView(DeskView):
    scope_area = "deadletters"
    perms = {"GET": VIEW}

    @extend_schema(
        operation_id="deadletters_list",
        parameters=[
            OpenApiParameter("state", str, enum=DeadLetter.State.values),
            OpenApiParameter(
                "biz_key", str, description="exactly this business key, as stored or as the client sent it"
            ),
            OpenApiParameter("rule", str, description="rule name"),
            OpenApiParameter("error_kind", str),
            OpenApiParameter("cursor", str),
            OpenApiParameter("limit", int, description="1 to 200; default 50"),
        ],
        responses={200: paginated("PaginatedDeadLetters", DeadLetterSerializer), **problems(*COMMON)},
    )
    def get(self, request):
        tickets = DeadLetter.objects.select_related("owner")
        state = query_choice(request, "state", DeadLetter.State.choices)
        if state:
            tickets = tickets.filter(state=state)
        biz_key = query_text(request, "biz_key")
        if biz_key:  # as stored or as the client sent it (`callback:order-7` is stored `…/callback%3Aorder-7`)
            tickets = tickets.filter(biz_key__in=search_candidates(biz_key))
        for param, column in (("rule", "rule_name"), ("error_kind", "error_kind")):
            value = query_text(request, param)
            if value:
                tickets = tickets.filter(**{column: value})
        pager = Cursor()
        page = pager.paginate_queryset(tickets, request, view=self)
        return pager.get_paginated_response(DeadLetterSerializer(page, many=True).data)


@extend_schema(tags=["deadletters"], parameters=[TICKET_ID])
class DeadLetterDetailView(DeskView):
    scope_area = "deadletters"
    perms = {"GET": VIEW}

    @extend_schema(operation_id="deadletters_get", responses={200: DeadLetterSerializer, **problems(401, 403, 404)})
    def get(self, request, ticket_id: int):
        return Response(DeadLetterSerializer(ticket_get(ticket_id)).data)


@extend_schema(tags=["deadletters"], parameters=[TICKET_ID])
class DeadLetterReplayView(DeskView):
    scope_area = "deadletters"
    perms = {"POST": ("deadletters.replay_deadletter",)}

    @extend_schema(
        operation_id="deadletters_replay",
        request=ReasonSerializer,
        responses={200: ReplaySerializer, **problems(*COMMON, 404, 409)},
        description="Replay with the original biz_key: the run is made due again (no new run). A second "
        "replay of the same ticket is refused with 409, so a double-click queues one replay.",
    )
    def post(self, request, ticket_id: int):
        ticket = ticket_get(ticket_id)
        data = validated(ReasonSerializer, request)
        try:
            done = run_retry_now(
                run_id=ticket.run_id, actor=request.user, now=timezone.now(), reason=data["reason"], ticket_id=ticket.id
            )
        except OperationError as exc:
            raise ApiProblem(409, "refused", str(exc)) from None
        if not done:
            ticket.refresh_from_db()
            raise ApiProblem(409, "not-open", f"ticket {ticket.id} is {ticket.state}: only an open ticket replays")
        return Response(ReplaySerializer({"replayed": True, "ticket": ticket_get(ticket.id)}).data)


@extend_schema(tags=["deadletters"], parameters=[TICKET_ID])
class DeadLetterCloseView(DeskView):
    scope_area = "deadletters"
    perms = {"POST": ("deadletters.close_deadletter",)}

    @extend_schema(
        operation_id="deadletters_close",
        request=CloseSerializer,
        responses={200: DeadLetterSerializer, **problems(*COMMON, 404, 409)},
    )
    def post(self, request, ticket_id: int):
        ticket = ticket_get(ticket_id)
        data = validated(CloseSerializer, request)
        try:
            done = deadletter_close(ticket_id=ticket.id, actor=request.user, now=timezone.now(), note=data["note"])
        except DeadLetterError as exc:
            raise invalid("note", str(exc)) from None
        if not done:
            ticket.refresh_from_db()
            raise ApiProblem(409, "not-open", f"ticket {ticket.id} is {ticket.state}: only an open ticket closes")
        return Response(DeadLetterSerializer(ticket_get(ticket.id)).data)


@extend_schema(tags=["deadletters"], parameters=[TICKET_ID])
class DeadLetterAssignView(DeskView):
    scope_area = "deadletters"
    perms = {"POST": ("deadletters.assign_deadletter",)}

    @extend_schema(
        operation_id="deadletters_assign",
        request=AssignSerializer,
        responses={200: DeadLetterSerializer, **problems(*COMMON, 404)},
        description="Give the ticket an owner (an active staff user, as in the admin); null unassigns.",
    )
    def post(self, request, ticket_id: int):
        ticket = ticket_get(ticket_id)
        data = validated(AssignSerializer, request)
        owner = None
        if data["owner"] is not None:
            owner = staff_user(data["owner"]) if "\x00" not in data["owner"] else None
            if owner is None:
                raise invalid("owner", f"no active staff user named {data['owner'][:150]!r}")
        deadletter_assign(
            ticket_id=ticket.id, owner=owner, actor=request.user, now=timezone.now(), reason=data["reason"]
        )
        return Response(DeadLetterSerializer(ticket_get(ticket.id)).data)
