"""Changelist pieces that stay fast with millions of runs: a count estimated from the
planner's statistics when nothing narrows the list, and list filters whose choices come from the
small tables (rules, the error vocabulary), never from a DISTINCT over every run."""

from django.contrib.admin import AllValuesFieldListFilter, RelatedFieldListFilter
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.utils.functional import cached_property

from runs.engine.store import database
from tasks.models import TriggerRule
from tasks.skills.error_words import ERROR_KIND_LABELS

# Above this many rows an unfiltered changelist shows the planner's estimate (pg_class.reltuples,
# refreshed by autovacuum's ANALYZE) instead of COUNT(*), which reads the whole table. The estimate
# scales with the table's pages, dead rows included: after a retention delete or a rolled-back bulk
# insert it can say 20,000 of a table that holds one row. So it is used only once a count that
# stops at ESTIMATE_ABOVE + 1 rows (cheap at any size) shows the table really is that large.
ESTIMATE_ABOVE = 10_000
# At most this many rules are offered as filter links; any other rule still filters by URL.
MAX_RULE_CHOICES = 100


class EstimatedCountPaginator(Paginator):
    """COUNT(*) for a filtered or searched list (served by its index), the planner's row estimate
    for the whole table on PostgreSQL when it is large. The page itself is always exact."""

    @cached_property
    def count(self) -> int:
        rows = self.object_list
        if isinstance(rows, QuerySet) and not rows.query.where:
            estimate = database.table_estimate(rows.model._meta.db_table)
            if estimate is not None and estimate > ESTIMATE_ABOVE:
                at_most = rows[: ESTIMATE_ABOVE + 1].count()
                return max(estimate, at_most) if at_most > ESTIMATE_ABOVE else at_most
        return super().count


class ErrorKindFilter(AllValuesFieldListFilter):
    """Filter runs by last error kind; the links are the error vocabulary, not a scan of the runs,
    each shown by its name in the user's language (the code stays in the URL)."""

    LABELS = ERROR_KIND_LABELS

    def __init__(self, field, request, params, model, model_admin, field_path):
        super().__init__(field, request, params, model, model_admin, field_path)
        # django-stubs type it as the QuerySet Django builds; the filter only iterates its values.
        self.lookup_choices = sorted(self.LABELS)  # type: ignore[assignment]

    def choices(self, changelist):
        for choice in super().choices(changelist):
            display = choice.get("display")
            label = self.LABELS.get(display) if isinstance(display, str) else None  # "All" is lazy: no label
            yield {**choice, "display": label} if label is not None else choice


class RuleFilter(RelatedFieldListFilter):
    """Filter runs by rule (rule__id__exact); the links are capped, a rule beyond them filters by URL."""

    def field_choices(self, field, request, model_admin):
        return [(r.pk, str(r)) for r in TriggerRule.objects.order_by("name").only("pk", "name")[:MAX_RULE_CHOICES]]
