"""Find runs and tickets by the text a person has: the key a client sent (`callback:order-7`), a key
pasted from a list or an alert (stored, or as the desk shows it, unescaped), or part of one.

One home for the admin's searches (runs, dead letters) and the API's `q` filter: the candidates come
from tasks.rules.keys.search_candidates, so a raw key and its stored, escaped form find the same run.
"""

from django.db.models import Q, QuerySet

from tasks.rules.keys import search_candidates


def key_search(queryset: QuerySet, raw: str, *, field: str = "biz_key") -> tuple[QuerySet, bool]:
    """(matches, whole): the rows whose key is one of the candidates, found through the key's index
    (whole=True); otherwise every row whose key contains one of them (whole=False; on PostgreSQL a
    trigram index serves the runs). An empty text matches nothing."""
    candidates = search_candidates(raw)
    if not candidates:
        return queryset.none(), False
    exact = queryset.filter(**{f"{field}__in": candidates})
    if exact.exists():
        return exact, True
    contains = Q()
    for text in candidates:
        contains |= Q(**{f"{field}__icontains": text})
    return queryset.filter(contains), False
