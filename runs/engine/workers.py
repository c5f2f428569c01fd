"""Worker liveness: each Celery worker process reports itself every few seconds (worker_beat, called by
harness_site/worker_watch.py); /healthz, the dashboard and the sweeper read the reports.

A worker is
  * "ok": it reported within WORKER_SILENT_AFTER and took work recently, or had none to take;
  * "not consuming": it reports, but work has waited for it for half its stall period (its watchdog
    ends it at the full period, so that monitors see the state before the restart);
  * "not responding": no report for WORKER_SILENT_AFTER (stopped, frozen, killed, or its host is gone).
  * "restarted": silent or stuck, but the same node (celery hostname) has started again since, under a
    new pid, and reports (from the moment the new process starts: worker_starting): its runner did its
    job; shown, but /healthz stays ok.
A report older than WORKER_FORGET_AFTER is deleted: a worker that was killed is restarted under a new
pid, and its old row would otherwise be listed for ever.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypedDict

from django.conf import settings

from harness_site.release import behind, code_migrations, label, schema_migrations
from runs.models import TaskRun, WorkerHeartbeat

WORKER_FORGET_AFTER = timedelta(minutes=2)
# What a heartbeat keeps of psycopg_pool's get_stats(): the pool now, and counters since it started
# (absent from get_stats() until first counted, so 0 then).
POOL_STATS = (
    "pool_max",
    "pool_size",
    "pool_available",
    "requests_waiting",
    "requests_num",
    "requests_queued",
    "requests_wait_ms",
    "requests_errors",
)


def pool_report(stats: dict[str, int] | None) -> dict[str, int] | None:
    """The heartbeat's copy of a pool's stats (None: no pool), with `in_use` = size - available: the
    connections lent out, and any the pool is opening for a thread that asked."""
    if stats is None:
        return None
    kept = {name: int(stats.get(name, 0)) for name in POOL_STATS}
    kept["in_use"] = max(kept["pool_size"] - kept["pool_available"], 0)
    return kept


def heartbeat_interval() -> timedelta:
    return timedelta(seconds=settings.HARNESS["WORKER_HEARTBEAT_SECONDS"])


def silent_after() -> timedelta:
    """No report for this long: not responding (five missed heartbeats, at least 10 s)."""
    return max(5 * heartbeat_interval(), timedelta(seconds=10))


@dataclass(frozen=True)
class WorkerReport:
    """What a worker process says of itself at one heartbeat."""

    name: str
    hostname: str
    pid: int
    queues: str
    pool: str
    concurrency: int
    started_at: datetime
    progress_at: datetime
    accepted: int
    active: int
    waiting: int
    held: list[int]
    stall_seconds: float
    stopping: bool = False
    db_pool: dict[str, int] | None = None


def worker_beat(report: WorkerReport, *, now: datetime) -> None:
    """Record one heartbeat (one upsert), and forget workers silent beyond WORKER_FORGET_AFTER."""
    fields = {k: v for k, v in vars(report).items() if k != "name"}
    defaults = {**fields, "beat_at": now, "migrations": code_migrations()}
    WorkerHeartbeat.objects.update_or_create(name=report.name, defaults=defaults)
    WorkerHeartbeat.objects.filter(beat_at__lt=now - WORKER_FORGET_AFTER).delete()


def worker_starting(*, name: str, hostname: str, pid: int, stall_seconds: float, now: datetime) -> None:
    """A worker process has started (its pool not yet): its first report, so that it replaces at once
    a predecessor of the same node that died. Its heartbeats fill in the rest once it is ready."""
    WorkerHeartbeat.objects.update_or_create(
        name=name,
        defaults={
            "hostname": hostname,
            "pid": pid,
            "started_at": now,
            "beat_at": now,
            "progress_at": now,
            "stall_seconds": stall_seconds,
            "migrations": code_migrations(),
        },
    )


def worker_progressed(
    *, started: int, finished: int, active: int, waiting: int, concurrency: int, queued_too_long: bool, stuck: int
) -> bool:
    """Did a worker make progress since its last heartbeat? Progress is work finished or started,
    never work merely received (a message a stuck pool process accepted and sits on is no progress).

    1. `stuck`: tasks running for longer than the stall period that are not runs keeping their
       lease alive (a tick or a sweep takes seconds): no progress, whatever else finishes.
    2. A task finished or started: progress.
    3. A free pool process while work waits (received, or queued beyond the stall period): none.
    4. Otherwise it is idle, or busy with tasks still young or runs that renew their leases: progress.
    `concurrency` 0 means unknown: any pool process may be free.
    """
    if stuck:
        return False
    if started > 0 or finished > 0:
        return True
    free = not concurrency or active < concurrency
    return not (free and (waiting or queued_too_long))


def runs_with_live_lease(run_ids: list[int], *, now: datetime) -> set[int]:
    """Those of `run_ids` that are running under a lease not yet expired (their renewer is alive)."""
    return set(
        TaskRun.objects.filter(id__in=run_ids, state=TaskRun.State.RUNNING, lease_expires_at__gt=now).values_list(
            "id", flat=True
        )
    )


def worker_gone(*, name: str) -> None:
    """A worker that exits cleanly takes its row with it."""
    WorkerHeartbeat.objects.filter(name=name).delete()


def worker_status(worker: WorkerHeartbeat, *, now: datetime) -> str:
    """ok, not consuming or not responding (see the module docstring)."""
    if now - worker.beat_at > silent_after():
        return "not responding"
    if (now - worker.progress_at).total_seconds() > worker.stall_seconds / 2:
        return "not consuming"
    return "ok"


class WorkerRow(TypedDict):
    """One worker as /healthz and the dashboard show it."""

    name: str
    status: str  # ok, not consuming, not responding, restarted
    queues: str
    queue_list: list[str]
    pool: str
    concurrency: int
    active: int
    waiting: int
    accepted: int
    last_heartbeat_age_seconds: float
    last_progress_age_seconds: float
    stopping: bool
    db_pool: dict[str, int] | None  # pool_report's copy
    db_wait_seconds: float


class WorkerHealth(TypedDict):
    """worker_health's answer: `ok` and why not (`reason` with names, `code` without), and every worker."""

    ok: bool
    reason: str
    code: str  # ok, worker_not_consuming, worker_not_responding
    workers: list[WorkerRow]


class OlderWorker(TypedDict):
    """A worker whose code is older than the schema (workers_older_than_schema)."""

    name: str
    release: str
    schema: str
    detail: str


def worker_health(*, now: datetime) -> WorkerHealth:
    """Every worker known within WORKER_FORGET_AFTER with its status, for /healthz and the dashboard.
    `reason` names the first worker that is not ok ("" when all are); `code` says the same without
    its name ("ok", "worker_not_consuming", "worker_not_responding")."""
    rows: list[WorkerRow] = []
    workers = list(WorkerHeartbeat.objects.filter(beat_at__gte=now - WORKER_FORGET_AFTER).order_by("name"))
    # A node (celery hostname) started again under a new pid that reports: the old one was restarted.
    restarted: dict[str, datetime] = {}
    for w in workers:
        if worker_status(w, now=now) == "ok" and not w.stopping:
            restarted[w.hostname] = max(w.started_at, restarted.get(w.hostname, w.started_at))
    for w in workers:
        status = worker_status(w, now=now)
        if status != "ok" and restarted.get(w.hostname, w.started_at) > w.started_at:
            status = "restarted"
        rows.append(
            {
                "name": w.name,
                "status": status,
                "queues": w.queues,
                "queue_list": [q for q in w.queues.split(",") if q],
                "pool": w.pool,
                "concurrency": w.concurrency,
                "active": w.active,
                "waiting": w.waiting,
                "accepted": w.accepted,
                "last_heartbeat_age_seconds": round((now - w.beat_at).total_seconds(), 1),
                "last_progress_age_seconds": round((now - w.progress_at).total_seconds(), 1),
                "stopping": w.stopping,
                "db_pool": w.db_pool,
                "db_wait_seconds": (w.db_pool or {}).get("requests_wait_ms", 0) / 1000,
            }
        )
    bad = [r for r in rows if r["status"] not in ("ok", "restarted") and not r["stopping"]]
    reason, code = "", "ok"
    if bad:
        r = bad[0]
        age = r["last_heartbeat_age_seconds" if r["status"] == "not responding" else "last_progress_age_seconds"]
        reason = f"worker {r['name']} {r['status']} for {age:.0f}s"
        code = "worker_" + str(r["status"]).replace(" ", "_")
    return {"ok": not bad, "reason": reason, "code": code, "workers": rows}


def workers_older_than_schema(*, now: datetime) -> list[OlderWorker]:
    """The workers reporting within WORKER_FORGET_AFTER whose code is older than the schema: each
    with `name`, `release` (its migrations where the schema is past them), `schema` (the schema's)
    and `detail` ("agents@host:1 runs release runs.0019_x; the schema is at runs.0020_y"). They keep
    working (migrations are expand-only, docs/upgrading.md); restart them on the new release."""
    schema = schema_migrations()
    older: list[OlderWorker] = []
    for w in WorkerHeartbeat.objects.filter(beat_at__gte=now - WORKER_FORGET_AFTER).order_by("name"):
        past = behind(w.migrations, schema)
        if not past:
            continue
        release = label({app: (w.migrations or {}).get(app, "?") for app in past}) if w.migrations else "unknown"
        detail = f"{w.name} runs release {release}; the schema is at {label(past)}"
        older.append({"name": w.name, "release": release, "schema": label(past), "detail": detail})
    return older


def worker_held_runs(*, now: datetime) -> set[int]:
    """Runs whose messages a responding worker says it holds (received, waiting or running)."""
    held: set[int] = set()
    for runs in WorkerHeartbeat.objects.filter(beat_at__gte=now - silent_after()).values_list("held", flat=True):
        held.update(r for r in runs or () if isinstance(r, int))
    return held
