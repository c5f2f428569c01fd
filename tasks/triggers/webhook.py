"""The webhook endpoint: POST /hooks/<source>/ (docs/events.md). HTTP in, one service call, JSON out;
a refusal is RFC 9457 problem details like every API's (harness_site/api/problems.py), its type
ending in the intake's reason code."""

from django.http import JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from harness_site.api.problems import ApiProblem, problem_json
from tasks.triggers.events import webhook_intake


@csrf_exempt  # authenticated by the HMAC signature, not by a session cookie
def webhook(request, source: str) -> JsonResponse:
    if request.method != "POST":
        refusal = ApiProblem(405, "method-not-allowed", "POST a signed JSON body; see docs/events.md")
        return problem_json(refusal, instance=request.path, headers={"Allow": "POST"})
    try:
        content_length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        content_length = None
    result = webhook_intake(
        source_name=source,
        headers=request.headers,
        # Never request.body: that would read the whole body before the size limit is applied.
        read_body=request.read,
        content_length=content_length,
        now=timezone.now(),
        remote_addr=request.META.get("REMOTE_ADDR", ""),
    )
    if not result.ok:
        # The reason codes are the metrics' and the refusal records' (snake_case); URN types are kebab-case.
        refusal = ApiProblem(result.status, result.outcome.replace("_", "-"), result.detail)
        return problem_json(refusal, instance=request.path)
    return JsonResponse(result.as_json(), status=result.status)
