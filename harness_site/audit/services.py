"""Recording operator actions. Call inside the action's transaction, so an action that rolls back
leaves no audit row, and an action that commits always has one."""

from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeAlias

from django.db.models import Model

from harness_site.audit.models import AuditEntry

if TYPE_CHECKING:  # the auth models are not imported at run time for a name
    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser

# Who acts: the request's user (an admin page, the API), or a name (a command's `--by`, a token's
# label, "sweeper"); None where no one is named (recorded as "None", as before).
Actor: TypeAlias = "AbstractBaseUser | AnonymousUser | str | None"


def actor_name(actor: Actor) -> str:
    """Who acted, as the audit log and the run's records name them: a user's username, else the
    name itself (a command's `--by`, a token's label)."""
    username = getattr(actor, "get_username", None)
    return username() if callable(username) else str(actor)


def audit_record(
    *,
    actor: Actor,
    action: str,
    target: Model,
    now: datetime,
    reason: str = "",
    details: dict[str, Any] | None = None,
    label: str = "",
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


def _target_type(target: Model) -> str:
    name = target._meta.model_name
    assert name is not None  # set on every concrete model (an instance is never abstract)
    return TARGET_TYPES.get(name, name)
