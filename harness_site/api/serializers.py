"""What the API reads and writes. Output serializers describe rows; the input serializers of rules
only document the shape (the rules import checks and words every refusal, tasks/services.py)."""

from django.contrib.auth import get_user_model
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from deadletters.models import DeadLetter
from runs.desk.objectives import RuleObjective, objective_status_for_rules
from runs.models import Attempt, Decision, SlotObjective, TaskRun
from tasks.models import TriggerRule
from tasks.models.fields import model_field
from tasks.services import EXPORT_FIELDS, IMPORT_TYPES, NULLABLE_IMPORT_FIELDS, REQUIRED_IMPORT_FIELDS

# --- strict JSON types ------------------------------------------------------------------------
# DRF coerces: a CharField takes 5 as "5", a FloatField takes true as 1.0 and "60" as 60.0, a
# BooleanField takes "yes" and 1. The API takes each value as the JSON type it documents.


class StrictCharField(serializers.CharField):
    default_error_messages = {"invalid": "must be a JSON string."}

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictFloatField(serializers.FloatField):
    default_error_messages = {"invalid": "must be a JSON number (not a string or a boolean)."}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    default_error_messages = {"invalid": "must be a whole JSON number (not a string or a boolean)."}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    default_error_messages = {"invalid": "must be true or false."}

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


# --- rules ---------------------------------------------------------------------------------


def _input_field(name: str, *, creating: bool) -> serializers.Field:
    """The documented type of one rule field, from the import's own type table."""
    kind = IMPORT_TYPES.get(name)
    field = model_field(TriggerRule, name)
    opts = {
        "required": creating and name in REQUIRED_IMPORT_FIELDS,
        "allow_null": name in NULLABLE_IMPORT_FIELDS,
        "help_text": str(field.help_text or field.verbose_name),
    }
    if name in ("agent", "business_calendar"):
        return StrictCharField(allow_blank=True, **{**opts, "allow_null": True})
    if name == "output_schema":
        return serializers.JSONField(**{**opts, "allow_null": True})
    if field.choices:
        return serializers.ChoiceField(choices=field.choices, **opts)
    if name == "run_at":
        return serializers.DateTimeField(**opts)
    if kind is str:
        return StrictCharField(allow_blank=True, trim_whitespace=False, **opts)
    if kind is bool:
        return StrictBooleanField(**opts)
    if kind is dict:
        return serializers.DictField(**opts)
    if kind is list:
        return serializers.ListField(child=StrictCharField(), **opts)
    if kind is int:
        return StrictIntegerField(**opts)
    if isinstance(kind, tuple):  # a number: int or float
        return StrictFloatField(**opts)
    return serializers.JSONField(**opts)


def _rule_input(name: str, *, creating: bool) -> type[serializers.Serializer]:
    fields = {f: _input_field(f, creating=creating) for f in EXPORT_FIELDS}
    doc = "A rule as `rules import` reads it; every field is checked, and refused with the same message."
    return type(name, (serializers.Serializer,), {**fields, "__doc__": doc})


RuleCreateSerializer = _rule_input("RuleCreate", creating=True)
RuleUpdateSerializer = _rule_input("RuleUpdate", creating=False)


class ObjectiveStatusSerializer(serializers.Serializer):
    """The rule's freshness objective now: its worst open slot, else its last finished one."""

    status = serializers.ChoiceField(choices=SlotObjective.Status.choices)
    cause = serializers.CharField(help_text="What holds the slot, in the request's language.")
    slot = serializers.DateTimeField(allow_null=True)
    deadline = serializers.DateTimeField(allow_null=True)
    expected_finish = serializers.DateTimeField(allow_null=True)
    acknowledged = serializers.BooleanField()
    checked_at = serializers.DateTimeField(allow_null=True, help_text="When the objective pass last looked.")


class RuleSerializer(serializers.ModelSerializer):
    """A rule as `rules export` writes it, plus its id, version (also the ETag), schedule state and
    objective status. A list passes `objectives` (rule id -> RuleObjective) in the context, read in
    two queries for the whole page."""

    agent = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    identity = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    business_calendar = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    pools = serializers.SlugRelatedField(slug_field="name", read_only=True, many=True)
    objective_status = serializers.SerializerMethodField()

    @extend_schema_field(ObjectiveStatusSerializer(allow_null=True))
    def get_objective_status(self, rule: TriggerRule) -> dict | None:
        found: dict[int, RuleObjective] | None = self.context.get("objectives")
        if found is None:
            found = objective_status_for_rules([rule.id]) if rule.objective else {}
        status = found.get(rule.id)
        if status is None:
            return None
        return ObjectiveStatusSerializer(
            {
                "status": status.status,
                "cause": status.cause,
                "slot": status.slot,
                "deadline": status.deadline,
                "expected_finish": status.expected_finish,
                "acknowledged": status.acknowledged,
                "checked_at": status.checked_at,
            }
        ).data

    class Meta:
        model = TriggerRule
        fields = (
            "id",
            "version",
            *EXPORT_FIELDS,
            "next_fire_at",
            "last_slot_at",
            "paused_at",
            "pause_reason",
            "created_at",
            "updated_at",
            "objective_status",
        )
        read_only_fields = fields


class ReasonSerializer(serializers.Serializer):
    reason = StrictCharField(required=False, allow_blank=True, default="", trim_whitespace=False)


class RequiredReasonSerializer(serializers.Serializer):
    reason = StrictCharField(help_text="Why; kept on the rule and in the audit log.", trim_whitespace=False)


class RunNowSerializer(serializers.Serializer):
    slot = StrictCharField(
        required=False,
        allow_blank=True,
        help_text="ISO 8601; without an offset it is read in the rule's timezone. Empty: this minute.",
    )
    biz_key = StrictCharField(required=False, allow_blank=True, help_text="Instead of a slot: this business key.")
    reason = StrictCharField(required=False, allow_blank=True, default="", trim_whitespace=False)


class RerunSerializer(serializers.Serializer):
    slots = serializers.ListField(
        child=StrictCharField(),
        allow_empty=False,
        max_length=500,
        help_text="The slots to re-run, ISO 8601; without an offset read in the rule's timezone.",
    )
    dry_run = StrictBooleanField(
        required=False, default=True, help_text="true (the default): answer with the plan, create nothing."
    )
    expect = serializers.ListField(
        child=StrictCharField(),
        required=False,
        max_length=500,
        help_text="The plan's `signature` from a dry run: with dry_run false, claim only if the plan still "
        "claims exactly these keys (else 409, nothing created).",
    )
    spacing_seconds = StrictIntegerField(
        required=False, default=10, min_value=0, max_value=3600, help_text="Runs are released one every this many."
    )
    reason = StrictCharField(required=False, allow_blank=True, default="", trim_whitespace=False, max_length=500)


class RerunItemSerializer(serializers.Serializer):
    slot = serializers.DateTimeField()
    biz_key = serializers.CharField()
    reason = serializers.CharField(help_text="The slot's recorded decision (e.g. missed); empty when none.")
    runs = serializers.BooleanField(help_text="true: this slot will run (or did, once claimed).")
    refused = serializers.CharField(help_text="Why not: has_run, same_key, not_a_slot or not_due; empty when it runs.")
    run_id = serializers.IntegerField(allow_null=True, help_text="The run that already has its key.")
    run_state = serializers.CharField(
        help_text="That run's state. A failed run is replayed with POST /runs/{id}/retry, not re-run."
    )
    run_url = serializers.CharField(allow_null=True)


class RerunPlanSerializer(serializers.Serializer):
    rule = serializers.CharField()
    dry_run = serializers.BooleanField()
    planned_at = serializers.DateTimeField()
    spacing_seconds = serializers.IntegerField()
    to_run = serializers.IntegerField()
    signature = serializers.ListField(child=serializers.CharField(), help_text="The keys a confirmation claims.")
    items = RerunItemSerializer(many=True)
    created = serializers.IntegerField(required=False, help_text="Runs created (dry_run false).")
    dedupe_hits = serializers.IntegerField(required=False)
    runs = serializers.ListField(child=serializers.IntegerField(), required=False, help_text="Their ids.")


# --- runs ----------------------------------------------------------------------------------


class AttemptSerializer(serializers.ModelSerializer):
    class Meta:
        model = Attempt
        fields = ("number", "fence", "worker", "started_at", "finished_at", "outcome", "error_kind", "error")
        read_only_fields = fields


class DecisionSerializer(serializers.ModelSerializer):
    rule = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = Decision
        fields = ("id", "rule", "slot", "biz_key", "reason", "details", "hits", "survivor", "created_at")
        read_only_fields = fields


RUN_FIELDS = (
    "id",
    "biz_key",
    "rule",
    "rule_name",
    "rule_version",
    "skill",
    "source",
    "state",
    "triggered_by",
    "identity",
    "executed_by",
    "object_key",
    "is_trial",
    "slot",
    "trigger_at",
    "run_after",
    "start_at",
    "finish_at",
    "attempts",
    "dedupe_hits",
    "last_error_kind",
    "last_error",
    "payload",
    "result",
)


class RunSerializer(serializers.ModelSerializer):
    rule = serializers.PrimaryKeyRelatedField(read_only=True, allow_null=True)

    class Meta:
        model = TaskRun
        fields: tuple[str, ...] = RUN_FIELDS
        read_only_fields: tuple[str, ...] = fields


class TicketRefSerializer(serializers.ModelSerializer):
    class Meta:
        model = DeadLetter
        fields = ("id", "state", "error_kind", "created_at")
        read_only_fields = fields


class RunDetailSerializer(RunSerializer):
    """A run with its attempts, the decisions about its slot and its dead-letter tickets."""

    attempt_list = AttemptSerializer(many=True, read_only=True)
    decisions = DecisionSerializer(many=True, read_only=True)
    tickets = TicketRefSerializer(many=True, read_only=True)

    class Meta(RunSerializer.Meta):
        fields = (*RUN_FIELDS, "attempt_list", "decisions", "tickets")
        read_only_fields = fields


class ClaimSerializer(serializers.Serializer):
    created = serializers.BooleanField(help_text="False: the key already had this run (a dedupe hit).")
    run = RunSerializer()


class ScheduleOnceSerializer(serializers.Serializer):
    """A delayed one-time run: a rule or a skill, when, and the idempotency key that becomes its biz_key."""

    idempotency_key = StrictCharField(
        max_length=200, help_text="Names this unit of work; a repeat returns the same run (the biz_key)."
    )
    rule = StrictCharField(required=False, help_text="A rule's name (its skill, identity and policy).")
    skill = StrictCharField(required=False, help_text="A registered skill, run with no rule.")
    params = serializers.DictField(required=False, help_text="Laid over the rule's params.")
    run_at = StrictCharField(
        required=False,
        help_text="ISO 8601 instant with an offset, or a local time with `timezone`.",
    )
    timezone = StrictCharField(required=False, help_text="IANA zone for a run_at without offset.")
    delay_seconds = StrictFloatField(required=False, help_text="Instead of run_at: seconds from now.")
    reason = StrictCharField(required=False, allow_blank=True, default="", trim_whitespace=False)


# --- dead letters --------------------------------------------------------------------------


class DeadLetterSerializer(serializers.ModelSerializer):
    owner = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = DeadLetter
        fields = (
            "id",
            "run",
            "biz_key",
            "rule_name",
            "source",
            "state",
            "owner",
            "error_kind",
            "last_error_digest",
            "last_error",
            "attempts",
            "first_failure_at",
            "last_failure_at",
            "note",
            "replayed_at",
            "closed_at",
            "created_at",
            "raw_payload",
        )
        read_only_fields = fields


class CloseSerializer(serializers.Serializer):
    note = StrictCharField(help_text="Why it needs no replay.", trim_whitespace=False)


class AssignSerializer(serializers.Serializer):
    owner = StrictCharField(allow_null=True, help_text="A staff username; null: unassign.")
    reason = StrictCharField(required=False, allow_blank=True, default="", trim_whitespace=False)


class ReplaySerializer(serializers.Serializer):
    replayed = serializers.BooleanField()
    ticket = DeadLetterSerializer()


def staff_user(username: str):
    return get_user_model().objects.filter(username=username, is_active=True, is_staff=True).first()
