"""Executing identities: which skills a run may execute as its rule's ServiceIdentity (invariant 8)."""

from tasks.models import ServiceIdentity
from tasks.skills.sdk import ErrorKind, SkillError


def identity_require(*, identity: str, skill: str) -> None:
    """Raise SkillError(permission_denied) unless `identity` may run `skill` now.

    "" means the run has no executing identity (an unrestricted rule). An identity deleted or
    disabled since the run was triggered is refused: permissions are checked when the work runs.
    permission_denied is never retried, so the run fails at once into a dead-letter ticket.
    """
    if not identity:
        return
    found = ServiceIdentity.objects.filter(name=identity).first()
    if found is None:
        raise SkillError(ErrorKind.PERMISSION_DENIED, f"executing identity {identity!r} does not exist")
    if not found.may_run(skill):
        why = "is disabled" if not found.enabled else f"may not run skill {skill!r}"
        raise SkillError(ErrorKind.PERMISSION_DENIED, f"executing identity {identity!r} {why}")
