"""What came of a ticket's replay? A replayed ticket is not a resolved one: the replay may still be
running, may have succeeded, or may have failed again (then the run has a newer ticket). Pure: the
ticket's state, its run's state and the run's newer ticket in; one outcome out."""

from dataclasses import dataclass

from django.utils.translation import gettext_lazy as _

# The outcome codes, each with the one label the desk shows for it.
LABELS = {
    "running": _("Replayed: still running"),
    "succeeded": _("Replayed: succeeded"),
    "failed_again": _("Replayed: failed again"),
    "cancelled": _("Replayed: cancelled"),
}
TONES = {"running": "warn", "succeeded": "ok", "failed_again": "bad", "cancelled": "warn"}


@dataclass(frozen=True)
class ReplayOutcome:
    code: str  # one of LABELS
    newer_ticket_id: int | None  # the ticket the failed replay opened

    @property
    def label(self) -> str:
        return str(LABELS[self.code])

    @property
    def tone(self) -> str:
        return TONES[self.code]


def replay_outcome(*, ticket_state: str, run_state: str, newer_ticket_id: int | None) -> ReplayOutcome | None:
    """The outcome of a replayed ticket's replay; None for a ticket that was not replayed.

    A newer ticket of the same run means the replay failed for good again, whatever happened after
    (that ticket tells its own story)."""
    if ticket_state != "replayed":
        return None
    if newer_ticket_id is not None or run_state == "failed":
        return ReplayOutcome("failed_again", newer_ticket_id)
    if run_state == "succeeded":
        return ReplayOutcome("succeeded", None)
    if run_state in ("cancelled", "coalesced"):
        return ReplayOutcome("cancelled", None)
    return ReplayOutcome("running", None)


def ticket_replay_outcome(ticket) -> ReplayOutcome | None:
    """replay_outcome for a ticket with its run, and `newer_ticket_id` annotated by the desk's queryset
    (the id of the same run's next ticket, if any)."""
    return replay_outcome(
        ticket_state=ticket.state,
        run_state=ticket.run.state,
        newer_ticket_id=getattr(ticket, "newer_ticket_id", None),
    )
