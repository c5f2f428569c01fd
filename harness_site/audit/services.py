"""Recording operator actions. Call inside the action's transaction, so an action that rolls back
leaves no audit row, and an action that commits always has one."""

from datetime import datetime

from harness_site.audit.models import AuditEntry


def actor_name(actor: object) -> str:
    """Who acted, as the audit log and the run's records name them: a user's username, else the
    name itself (a command's `--by`, a token's label)."""
    username = getattr(actor, "get_username", None)
    return username() if callable(username) else str(actor)


def audit_record(
    *, actor, action: str, target, now: datetime, reason: str = "", details: dict | None = None, label: str = ""
) -> AuditEntry:
    """One audit row. `actor` is a user or a name; `target` a model instance (rule, run, lease, ticket)."""
    return AuditEntry.objects.create(
        at=now,
        actor=actor_name(actor),
        action=action,
        target_type=_target_type(target),
        target_id=str(target.pk),
        target_label=(label or str(target))[:255],
        reason=reason,
        details=details or {},
    )


TARGET_TYPES = {
    "triggerrule": "rule",
    "taskrun": "run",
    "runlease": "run",
    "lease": "lease",
    "deadletter": "deadletter",
    "backpressure": "watermark",
}


def _target_type(target) -> str:
    return TARGET_TYPES.get(target._meta.model_name, target._meta.model_name)
