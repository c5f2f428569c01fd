"""The webhook endpoint: POST /hooks/<source>/ (docs/events.md). HTTP in, one service call, JSON out."""

from django.http import JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from tasks.triggers.events import webhook_intake


@csrf_exempt  # authenticated by the HMAC signature, not by a session cookie
def webhook(request, source: str) -> JsonResponse:
    if request.method != "POST":
        response = JsonResponse(
            {"error": "method_not_allowed", "detail": "POST a signed JSON body; see docs/events.md"}, status=405
        )
        response["Allow"] = "POST"
        return response
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
    return JsonResponse(result.as_json(), status=result.status)
