"""Pools in rule import/export files: `{"pools": [...], "agents": [...], "rules": [...]}`, upserted by
name. Rules name the pools they draw from ("pools": ["reports"]), agents their provider's pool
("pool": "openai"). The global pool may be tuned from a file like any other, never removed.
"""

from django.core.exceptions import ValidationError

from tasks.file_items import STAGING_ERRORS, field_problems, file_entries, staging_errors
from tasks.models.pool import Pool

POOL_FIELDS = (
    "name",
    "reason",
    "enabled",
    "max_concurrency",
    "rate_count",
    "rate_period_seconds",
    "rate_burst",
    "key_template",
    "spread_seconds",
)
REQUIRED_POOL_FIELDS = ("name", "reason")

Staged = dict[str, tuple[Pool, bool, bool]]


def pool_export() -> list[dict]:
    return [{f: getattr(p, f) for f in POOL_FIELDS} for p in Pool.objects.order_by("name")]


def pool_stage(items) -> tuple[Staged, list[str]]:
    """Validate the file's pools without saving: name → (pool, created, changed), and errors that
    name the pool and the field at fault."""
    staged: Staged = {}
    errors: list[str] = []
    if items is None:
        return staged, errors
    if not isinstance(items, list):
        return staged, ["file: pools must be a list of objects"]
    for label, name, item in file_entries(items, "pool", errors):
        problems = field_problems(item, POOL_FIELDS, REQUIRED_POOL_FIELDS)
        if isinstance(name, str) and name in staged:
            problems.append(f"field name: {name!r} appears more than once in the file")
        if problems or not isinstance(name, str):  # a name that is not a text is among the problems
            errors.extend(f"{label} {p}" for p in problems)
            continue
        pool = Pool.objects.filter(name=name).first()
        created = pool is None
        pool = pool or Pool()
        before = None if created else {f: getattr(pool, f) for f in POOL_FIELDS}
        for f, value in item.items():
            setattr(pool, f, value)
        try:
            pool.full_clean()
        except (ValidationError, *STAGING_ERRORS) as exc:
            errors.extend(staging_errors(label, exc))
            continue
        staged[name] = (pool, created, created or before != {f: getattr(pool, f) for f in POOL_FIELDS})
    return staged, errors


def pool_lookup(name, staged: Staged) -> tuple[Pool | None, str | None]:
    """The pool a file names (from the file or the database), or an error text."""
    if not isinstance(name, str) or not name:
        return None, f"give a pool's name, got {name!r}"
    pool = staged[name][0] if name in staged else Pool.objects.filter(name=name).first()
    if pool is None:
        return None, f"no pool named {name!r} in the file or the database"
    return pool, None


def pool_save(staged: Staged) -> None:
    """Save changed pools; call inside the import's transaction, before agents and rules."""
    for pool, _created, changed in staged.values():
        if changed:
            pool.save()
