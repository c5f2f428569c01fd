"""Pools in rule import/export files: `{"pools": [...], "agents": [...], "rules": [...]}`, upserted by
name. Rules name the pools they draw from ("pools": ["reports"]), agents their provider's pool
("pool": "openai"). The global pool may be tuned from a file like any other, never removed.
"""

from django.core.exceptions import ValidationError

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
    for index, item in enumerate(items):
        label = f"pool #{index + 1}"
        if not isinstance(item, dict):
            errors.append(f"{label}: expected an object")
            continue
        name = item.get("name")
        label = f"pool {name!r}" if isinstance(name, str) and name else label
        unknown = sorted(set(item) - set(POOL_FIELDS))
        problems = [f"field {unknown[0]}: unknown field; known fields: {', '.join(POOL_FIELDS)}"] if unknown else []
        problems += [f"field {f}: required" for f in REQUIRED_POOL_FIELDS if item.get(f) in (None, "")]
        if isinstance(name, str) and name in staged:
            problems.append(f"field name: {name!r} appears more than once in the file")
        if problems:
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
        except (ValidationError, TypeError, ValueError) as exc:
            messages = exc.message_dict if isinstance(exc, ValidationError) else {"value": [str(exc)]}
            for f, texts in messages.items():
                errors.extend(f"{label} field {f}: {m}" for m in texts)
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
