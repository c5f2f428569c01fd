"""Liveness for outside monitors."""

from django.http import JsonResponse
from django.utils import timezone

from runs import selectors


def healthz(request):
    """200 while the scheduler ticked recently, 503 otherwise; always says the age of the last tick."""
    status = selectors.scheduler_health(now=timezone.now())
    return JsonResponse(status, status=200 if status["ok"] else 503)
