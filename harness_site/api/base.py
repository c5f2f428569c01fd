"""What every API view shares: permissions by method, problem responses, strict query values."""

from datetime import datetime

from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse
from rest_framework.views import APIView

from harness_site.api.problems import PROBLEM_TYPE, ApiProblem, ProblemSerializer, invalid

MAX_QUERY_VALUE = 255  # a biz_key is at most 255 characters; nothing we store is longer
MAX_ID_DIGITS = 18  # a bigint has 19 digits; 18 always fit


class DeskView(APIView):
    # `perms` maps an HTTP method to the admin permissions it needs; `scope_area` names the token scope.

    perms: dict[str, tuple[str, ...]] = {}
    scope_area = ""

    def required_perms_for(self, request) -> tuple[str, ...]:
        return self.perms.get(request.method, self.perms.get("GET", ()))


def problems(*codes: int) -> dict:
    """drf-spectacular responses for the problem statuses a view may answer."""
    return {
        (code, PROBLEM_TYPE): OpenApiResponse(ProblemSerializer, description=f"problem details ({code})")
        for code in codes
    }


COMMON = (400, 401, 403)
RUN_ID = OpenApiParameter(
    "run_id", int, OpenApiParameter.PATH, description="the run's id", examples=[OpenApiExample("a run", value=1)]
)
TICKET_ID = OpenApiParameter(
    "ticket_id", int, OpenApiParameter.PATH, description="the ticket's id", examples=[OpenApiExample("a ticket", 1)]
)
RULE_NAME = OpenApiParameter(
    "name",
    str,
    OpenApiParameter.PATH,
    description="the rule's name",
    examples=[OpenApiExample("a rule", value="daily-report")],
)


def ascii_number(text) -> int | None:
    """A whole number written in ASCII digits only, at most 18 of them; None for anything else.
    str.isdigit() and int() also take full-width, Arabic-Indic or superscript digits, signs and
    spaces: an id or a count spelled so must not name a real object or be used."""
    text = str(text)
    if not (text.isascii() and text.isdigit() and len(text) <= MAX_ID_DIGITS):
        return None
    return int(text)


def query_text(request, name: str) -> str:
    """A query parameter PostgreSQL can take (no NUL) and no longer than anything stored; "" if absent."""
    value = request.query_params.get(name, "")
    if "\x00" in value or len(value) > MAX_QUERY_VALUE:
        raise invalid(name, f"at most {MAX_QUERY_VALUE} characters, no NUL")
    return value


def query_choice(request, name: str, choices) -> str:
    value = query_text(request, name)
    allowed = [c for c, _label in choices]
    if value and value not in allowed:
        raise invalid(name, f"{value!r} is not one of {', '.join(allowed)}")
    return value


def query_bool(request, name: str) -> bool | None:
    value = query_text(request, name).lower()
    if value in ("", None):
        return None
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise invalid(name, f"{value!r} is not true or false")


def query_instant(request, name: str) -> datetime | None:
    value = query_text(request, name)
    if not value:
        return None
    try:
        parsed = parse_datetime(value)
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise invalid(name, f"{value!r} is not an ISO 8601 instant with an offset, e.g. 2026-12-01T09:00:00Z")
    return parsed


def body_object(request) -> dict:
    """The JSON object in the body ({} when empty)."""
    data = request.data
    if not isinstance(data, dict):
        raise ApiProblem(400, "malformed-json", "body must be a JSON object")
    return data


def validated(serializer_class, request) -> dict:
    serializer = serializer_class(data=body_object(request))
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data
