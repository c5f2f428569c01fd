"""Error kinds in the reader's language: the one home of their words, for the run list's filter
and wherever a kind is shown (ticket, dead-letter desk, run pages). The code stays in URLs and JSON."""

from django.utils.translation import gettext_lazy as _

from tasks.skills.sdk import ErrorKind, ProviderWait

# Kinds the runtime records on a run that waits or was given up, not a skill's error (runs/engine/outcome.py).
BUDGET_WAIT_KIND = "budget"
START_WINDOW_KIND = "start_window"

ERROR_KIND_LABELS = {
    ErrorKind.TIMEOUT: _("timeout"),
    ErrorKind.RATE_LIMITED: _("rate limited"),
    ErrorKind.DEPENDENCY_UNREACHABLE: _("dependency unreachable"),
    ErrorKind.INVALID_PARAM: _("invalid parameter"),
    ErrorKind.PERMISSION_DENIED: _("permission denied"),
    ErrorKind.STATE_PRECONDITION: _("state precondition"),
    ErrorKind.LEASE_LOST: _("lease lost"),
    ErrorKind.MODEL_INVALID_OUTPUT: _("invalid model output"),
    ErrorKind.UNCLASSIFIED: _("unclassified"),
    BUDGET_WAIT_KIND: _("waiting for budget"),
    ProviderWait.kind: _("waiting for the provider"),
    START_WINDOW_KIND: _("start window passed"),
}


def error_kind_label(kind: str | None) -> str:
    """A kind in the user's language; a kind the vocabulary does not know (a skill's own) as it is; "" for none."""
    if not kind:
        return ""
    return str(ERROR_KIND_LABELS.get(kind, kind))
