"""Recording operator actions. Call inside the action's transaction, so an action that rolls back
leaves no audit row, and an action that commits always has one."""

from datetime import datetime

from harness_site.audit.models import AuditEntry


def audit_record(
    *, actor, action: str, target, now: datetime, reason: str = "", details: dict | None = None, label: str = ""
) -> AuditEntry:
    """One audit row. `actor` is a user or a name; `target` a model instance (rule, run, lease, ticket)."""
    return AuditEntry.objects.create(
        at=now,
        actor=getattr(actor, "get_username", lambda: str(actor))(),
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
