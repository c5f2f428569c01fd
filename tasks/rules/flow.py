"""Flow control maths: pool keys and the token bucket. Pure: no ORM, no clock (callers pass `now`)."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from tasks.rules.keys import KeyTemplateError, placeholders

# What a run carries that a pool key may be rendered from (runs.TaskRun fields).
# {object_key} is the rule's rendered object key; {source} scheduler/webhook/queue/operator…;
# {triggered_by} the sender or operator (the tenant of an event); {identity} the executing identity.
POOL_KEY_PLACEHOLDERS = ("object_key", "rule", "source", "triggered_by", "identity", "skill")
MAX_POOL_KEY_LENGTH = 200


def pool_key_validate(template: str) -> None:
    """A pool key template may use only the run's own fields; blank means one limit for the whole pool."""
    unknown = [n for n in placeholders(template) if n not in POOL_KEY_PLACEHOLDERS]
    if unknown:
        raise KeyTemplateError(
            f"Unknown placeholder {{{unknown[0]}}}. Allowed: "
            + ", ".join("{" + n + "}" for n in POOL_KEY_PLACEHOLDERS)
            + "."
        )


def pool_key_render(template: str, values: dict[str, str]) -> str:
    """The key a run takes its slot under; "" for an unkeyed pool."""
    if not template:
        return ""
    pool_key_validate(template)
    key = template.format_map({n: str(values.get(n) or "") for n in POOL_KEY_PLACEHOLDERS})
    return key[:MAX_POOL_KEY_LENGTH]


@dataclass(frozen=True)
class Bucket:
    """A token bucket's state: `tokens` as of `at`."""

    tokens: float
    at: datetime


@dataclass(frozen=True)
class Take:
    taken: bool
    bucket: Bucket
    # When a token will next be there (taken=False), else None.
    retry_at: datetime | None


def bucket_take(
    bucket: Bucket | None, *, rate_count: int, period_seconds: float, burst: int | None, now: datetime
) -> Take:
    """Refill at rate_count per period up to `burst` (default rate_count) tokens, then take one if there is one.

    A new bucket starts full: the first `burst` runs go at once, the rest are paced. `now` earlier than
    the stored instant (another machine's clock) refills nothing rather than going negative.
    """
    capacity = float(burst if burst else rate_count)
    per_second = rate_count / period_seconds
    if bucket is None:
        tokens = capacity
    else:
        elapsed = max((now - bucket.at).total_seconds(), 0.0)
        tokens = min(capacity, bucket.tokens + elapsed * per_second)
    if tokens >= 1.0:
        return Take(taken=True, bucket=Bucket(tokens=tokens - 1.0, at=now), retry_at=None)
    wait = (1.0 - tokens) / per_second
    return Take(taken=False, bucket=Bucket(tokens=tokens, at=now), retry_at=now + timedelta(seconds=wait))


@dataclass(frozen=True)
class FairGroup:
    """The runs of one fair key waiting for a pool: when that key last started a run there, and
    when its oldest waiter began waiting."""

    key: str
    last_start_at: datetime | None
    oldest_since: datetime


def fair_order(groups: list[FairGroup], picks: int) -> list[str]:
    """Which fair key each of the next `picks` free slots goes to: round robin, starting with the key
    that started a run longest ago (never first), ties by the oldest waiter, then by name.

    A key picked moves to the back of the line, so with slots for three keys and a backlog of one,
    the others are served in turn instead of waiting behind it. Keys may repeat when picks > keys.
    """
    if not groups or picks <= 0:
        return []
    never = datetime.min.replace(tzinfo=groups[0].oldest_since.tzinfo)
    line = sorted(groups, key=lambda g: (g.last_start_at or never, g.oldest_since, g.key))
    return [line[i % len(line)].key for i in range(picks)]
