"""Errors as RFC 9457 problem details (application/problem+json), each naming the field at fault.

    {"type": "urn:agent-harness:problem:invalid-field", "title": "Invalid input", "status": 400,
     "detail": "cron: ...", "field": "cron", "errors": [{"field": "cron", "detail": "..."}]}

`type` is a stable code (listed in docs/api.md); `field` is the first field at fault ("" for the
request as a whole); `errors` lists every one. Nothing a client sends gives a 500.
"""

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, JsonResponse
from rest_framework import exceptions, parsers, serializers
from rest_framework.response import Response

from tasks.rules.json_limits import strict_loads

PROBLEM_TYPE = "application/problem+json"
TYPE_PREFIX = "urn:agent-harness:problem:"
# A rule with a long output schema is a few KiB; nothing the API takes comes near this.
MAX_BODY = 256 * 1024


class ApiProblem(exceptions.APIException):
    """A refusal with a code, a reason and the field at fault."""

    def __init__(
        self,
        status_code: int,
        code: str,
        detail: str,
        *,
        field: str = "",
        errors: list[dict] | None = None,
        title: str = "",
        **extra,
    ):
        super().__init__(detail)
        self.status_code = status_code
        self.code = code
        self.field = field
        self.errors = errors if errors is not None else ([{"field": field, "detail": detail}] if field else [])
        self.title = title
        self.extra = extra


def body_limit() -> int:
    """The largest body any API endpoint takes: ours, or Django's DATA_UPLOAD_MAX_MEMORY_SIZE if smaller."""
    django_limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return MAX_BODY if django_limit is None else min(MAX_BODY, django_limit)


def body_too_large() -> ApiProblem:
    return ApiProblem(413, "body-too-large", f"the body is larger than {body_limit()} bytes")


def invalid(field: str, detail: str, *, code: str = "invalid-field") -> ApiProblem:
    return ApiProblem(400, code, detail, field=field)


def invalid_all(errors: list[dict], *, code: str = "invalid-field") -> ApiProblem:
    """400 for several fields at once; errors are {"field", "detail"}."""
    first = errors[0] if errors else {"field": "", "detail": "invalid input"}
    return ApiProblem(400, code, "; ".join(_line(e) for e in errors), field=first["field"], errors=errors)


def _line(error: dict) -> str:
    return f"{error['field']}: {error['detail']}" if error["field"] else error["detail"]


TITLES = {
    400: "Invalid input",
    401: "Authentication required",
    403: "Permission denied",
    404: "Not found",
    405: "Method not allowed",
    406: "Not acceptable",
    409: "Conflict",
    412: "Precondition failed",
    413: "Request body too large",
    415: "Unsupported media type",
    428: "Precondition required",
    429: "Too many requests",
    500: "Internal error",
    503: "Service unavailable",
}
CODES = {
    exceptions.NotAuthenticated: "authentication-required",
    exceptions.AuthenticationFailed: "authentication-failed",
    exceptions.PermissionDenied: "permission-denied",
    exceptions.NotFound: "not-found",
    exceptions.MethodNotAllowed: "method-not-allowed",
    exceptions.NotAcceptable: "not-acceptable",
    exceptions.UnsupportedMediaType: "unsupported-media-type",
    exceptions.ParseError: "malformed-json",
    exceptions.Throttled: "throttled",
}


def problem_body(exc: ApiProblem, *, instance: str = "") -> dict:
    body = {
        "type": TYPE_PREFIX + exc.code,
        "title": exc.title or TITLES.get(exc.status_code, "Error"),
        "status": exc.status_code,
        "detail": str(exc.detail),
        "field": exc.field,
        "errors": exc.errors,
        **exc.extra,
    }
    if instance:
        body["instance"] = instance
    return body


def problem_response(exc: ApiProblem, *, instance: str = "", headers: dict | None = None) -> Response:
    return Response(
        problem_body(exc, instance=instance), status=exc.status_code, content_type=PROBLEM_TYPE, headers=headers
    )


def problem_json(exc: ApiProblem, *, instance: str = "", headers: dict | None = None) -> JsonResponse:
    """The same document outside DRF: for errors raised before a view runs, and plain Django views."""
    return JsonResponse(
        problem_body(exc, instance=instance), status=exc.status_code, content_type=PROBLEM_TYPE, headers=headers
    )


def problem_handler(exc, context):
    """DRF's exception handler: every refusal as a problem document."""
    request = context.get("request")
    instance = request.path if request is not None else ""
    headers = {}
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or "not found")
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or "permission denied")
    if isinstance(exc, ApiProblem):
        return problem_response(exc, instance=instance)
    if isinstance(exc, exceptions.ValidationError):
        return problem_response(invalid_all(_flatten(exc.detail)), instance=instance)
    if isinstance(exc, exceptions.APIException):
        if getattr(exc, "auth_header", None):
            headers["WWW-Authenticate"] = exc.auth_header
        if getattr(exc, "wait", None):
            headers["Retry-After"] = str(int(exc.wait))
        code = next((c for klass, c in CODES.items() if isinstance(exc, klass)), "error")
        problem = ApiProblem(exc.status_code, code, _text(exc.detail))
        return problem_response(problem, instance=instance, headers=headers)
    return None  # not a refusal: a bug, left to Django's 500 handling and its log


def _text(detail) -> str:
    if isinstance(detail, list):
        return "; ".join(_text(d) for d in detail)
    if isinstance(detail, dict):
        return "; ".join(f"{k}: {_text(v)}" for k, v in detail.items())
    return str(detail)


def _flatten(detail, prefix: str = "") -> list[dict]:
    """DRF's nested validation errors as [{"field": "a.b", "detail": "..."}]."""
    if isinstance(detail, dict):
        out = []
        for key, value in detail.items():
            name = "" if key == "non_field_errors" else f"{prefix}.{key}" if prefix else str(key)
            out += _flatten(value, name)
        return out
    if isinstance(detail, list):
        out = []
        for index, value in enumerate(detail):
            if isinstance(value, dict | list):
                out += _flatten(value, f"{prefix}[{index}]")
            else:
                out.append({"field": prefix, "detail": str(value)})
        return out
    return [{"field": prefix, "detail": str(detail)}]


class StrictJSONParser(parsers.JSONParser):
    """JSON bodies as the rest of the harness reads them (tasks/rules/json_limits.py): UTF-8, no
    NaN or Infinity, no NUL, bounded nesting and number size; the fault is named."""

    def parse(self, stream, media_type=None, parser_context=None):
        # Read at most one byte past the limit: a client cannot make the server hold a huge body,
        # even where harness_site.api.surface has not refused it by its Content-Length already.
        limit = body_limit()
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise body_too_large()
        try:
            return strict_loads(raw)
        except ValueError as exc:
            raise exceptions.ParseError(f"body is not valid JSON: {exc}") from None


class ErrorItemSerializer(serializers.Serializer):
    field = serializers.CharField()
    detail = serializers.CharField()


class ProblemSerializer(serializers.Serializer):
    """RFC 9457 problem details."""

    type = serializers.CharField()
    title = serializers.CharField()
    status = serializers.IntegerField()
    detail = serializers.CharField()
    field = serializers.CharField(help_text="The first field at fault; empty for the request as a whole.")
    errors = ErrorItemSerializer(many=True)
    instance = serializers.CharField(required=False)
