"""Which requests are API requests, and the one place their refusals become problem details.

Every API surface (the REST API, the flags and ping API, /metrics, the webhooks) answers every 4xx
and 5xx as RFC 9457 problem details, whatever raised it: a view, DRF
(harness_site.api.problems.problem_handler), or Django itself before any view runs (an unknown path,
a CSRF failure, a body too large, a server error). This middleware sits first, so that:

1. a body larger than the API takes is refused by its Content-Length, before anything reads it;
2. any other refusal that is not already a problem document becomes one of the same status, its
   Allow, WWW-Authenticate and Retry-After headers kept (a 5xx too, except under DEBUG, where the
   traceback page is worth more; the error is logged by Django either way).
"""

from django.conf import settings

from harness_site.api.problems import PROBLEM_TYPE, ApiProblem, body_limit, body_too_large, problem_json

API_PREFIXES = ("/api/", "/metrics", "/hooks/")
# Webhook sources set their own body limit (up to 10 MiB); the webhook view refuses by it, unread.
BODY_CHECKED_PREFIXES = ("/api/", "/metrics")
# What a refusal says when the code that refused said nothing we can pass on.
DETAILS = {
    400: ("bad-request", "the request could not be read"),
    403: ("permission-denied", "permission denied"),
    404: ("not-found", "no such endpoint; see /api/v1/schema/"),
    405: ("method-not-allowed", "method not allowed on this endpoint; see its Allow header"),
    413: ("body-too-large", "the request body is too large"),
    500: ("internal-error", "the server failed to answer; the error is logged"),
}
KEPT_HEADERS = ("Allow", "WWW-Authenticate", "Retry-After")


def is_api_path(path: str) -> bool:
    return path.startswith(API_PREFIXES)


class ApiProblemMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if not is_api_path(request.path_info):
            return self.get_response(request)
        checked = request.path_info.startswith(BODY_CHECKED_PREFIXES)
        refusal = self._content_length_refusal(request) if checked else None
        if refusal is not None:
            return problem_json(refusal, instance=request.path)
        response = self.get_response(request)
        if response.status_code < 400 or response.get("Content-Type", "").startswith(PROBLEM_TYPE):
            return response
        if response.status_code >= 500 and settings.DEBUG:
            return response  # a developer's traceback page; production answers the problem below
        return self._as_problem(request, response)

    @staticmethod
    def _content_length_refusal(request) -> ApiProblem | None:
        claimed = request.META.get("CONTENT_LENGTH") or ""
        if not claimed:
            return None
        # ASCII digits only: int() would take full-width digits or " 12 ", which no client means.
        if not (claimed.isascii() and claimed.isdigit()):
            return ApiProblem(400, "bad-content-length", f"Content-Length {claimed[:30]!r} is not a number of bytes")
        if int(claimed) > body_limit():
            return body_too_large()
        return None

    @staticmethod
    def _as_problem(request, response):
        status = response.status_code
        code, detail = DETAILS.get(status, ("error" if status < 500 else "internal-error", response.reason_phrase))
        if status == 403 and not response.streaming and b"CSRF" in response.content[:2000]:
            code, detail = "csrf-failed", "CSRF check failed: send the csrftoken cookie and the X-CSRFToken header"
        headers = {name: response[name] for name in KEPT_HEADERS if response.has_header(name)}
        return problem_json(ApiProblem(status, code, detail), instance=request.path, headers=headers)
