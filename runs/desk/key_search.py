"""Find runs and tickets by the text a person has: the key a client sent (`callback:order-7`), a key
pasted from a list or an alert (stored, or as the desk shows it, unescaped), or part of one.

One home for the admin's searches (runs, dead letters) and the API's `q` filter: the candidates come
from tasks.rules.keys.search_candidates, so a raw key and its stored, escaped form find the same run.
"""

import re
from typing import TypeVar

from django.db.models import Model, Q, QuerySet, Value
from django.db.models.functions import StrIndex, Upper
from django.db.models.lookups import GreaterThan

from tasks.rules.keys import search_candidates

# A run of this many digits is taken for an id (an order number, a timestamp): few keys share it.
RARE_DIGITS = 5
DIGITS = re.compile(r"[0-9]+")


def indexed_part(text: str) -> str:
    """The part of `text` the trigram index is asked for: its longest run of at least RARE_DIGITS
    digits (`order-500007` -> `500007`), else the whole text.

    Why: a key's letters are mostly its rule's namespace and template (`rule/…/event/order-`),
    shared by every run of the rule, and PostgreSQL reads each trigram's whole posting list, so a
    condition naming them costs in proportion to the table; a long number is the unit of work and
    few keys share it. The whole text is still checked on each match (contains). Shorter numbers
    (`2026-12-01`, `order-7`) are common or have no trigram: there the whole text is the better probe."""
    runs = [m.group() for m in DIGITS.finditer(text)]
    longest = max(runs, key=len, default="")
    return longest if len(longest) >= RARE_DIGITS else text


def contains(field: str, text: str) -> Q:
    """Keys containing `text`, any case: an icontains on indexed_part(text), served by
    run_biz_key_trgm_idx (UPPER(biz_key) gin_trgm_ops) on PostgreSQL, and the whole text checked
    with STRPOS, which the index cannot serve, so the planner does not hand it the common words."""
    part = indexed_part(text)
    q = Q(**{f"{field}__icontains": part})
    if part != text:
        q &= Q(GreaterThan(StrIndex(Upper(field), Upper(Value(text))), 0))
    return q


_M = TypeVar("_M", bound=Model)


def key_search(queryset: QuerySet[_M], raw: str, *, field: str = "biz_key") -> tuple[QuerySet[_M], bool]:
    """(matches, whole): the rows whose key is one of the candidates, found through the key's index
    (whole=True); otherwise every row whose key contains one of them, any case (whole=False; on
    PostgreSQL the trigram index serves the runs: see contains). An empty text matches nothing."""
    candidates = search_candidates(raw)
    if not candidates:
        return queryset.none(), False
    exact = queryset.filter(**{f"{field}__in": candidates})
    if exact.exists():
        return exact, True
    found = Q()
    for text in candidates:
        found |= contains(field, text)
    return queryset.filter(found), False
