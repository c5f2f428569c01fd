"""Event intake: one path for webhooks, queue messages, file arrivals and Python callers.

An event is refused (recorded, counted, nothing run) or accepted: mapped to object id, action
and version, rendered into the rule's biz_key and claimed through runs.engine.claims.run_claim, so the
same business event is one run however often and however it arrives (invariants 1 and 7).
docs/events.md describes the protocol and every refusal code.
"""

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import F

from harness_site import tracing
from runs.desk.selectors import run_coalesced_into
from runs.engine.claims import run_claim
from runs.models import Decision, TaskRun
from tasks.models import EventDelivery, EventMetric, EventRefusal, RefusalCount, TriggerSource
from tasks.rules import events, signatures
from tasks.rules.events import Refused
from tasks.secrets import WEBHOOK, secret_value
from tasks.triggers.work import work_for_event

log = logging.getLogger("harness.events")

ACCEPTED = "accepted"  # a new run
DUPLICATE = "duplicate"  # the business event (biz_key) already had a run: 200 with that run
REDELIVERY = "redelivery"  # the same delivery id with the same body again: 200 with its run
# Backpressure (docs/backpressure.md): answered 202 so the sender knows it was received and needs no
# resend, with the outcome saying it will not run as its own run.
SHED = "shed"  # recomputable, above the high watermark: a "shed" decision, nothing run
COALESCED = "coalesced"  # its run was replaced by a newer trigger of the same object: the survivor runs
# Delivery and refusal rows are kept this long. A webhook delivery id only has to be remembered
# for the timestamp tolerance (an older signed request is refused as stale), so this is ample.
EVENT_RECORD_RETENTION = timedelta(days=30)
UNKNOWN_SOURCE_METRIC = ""
# Unauthenticated refusals kept as rows per source (or all unknown sources) and reason: a sample.
REFUSAL_SAMPLE = 10


@dataclass(frozen=True)
class IntakeResult:
    status: int  # the HTTP status the webhook answers with
    outcome: str  # accepted | duplicate | redelivery | a refusal code
    detail: str = ""
    run_id: int | None = None
    biz_key: str = ""
    extra: dict = field(default_factory=dict)  # shed: the decision; coalesced: the survivor

    @property
    def ok(self) -> bool:
        return self.status < 400

    @property
    def created(self) -> bool:
        return self.outcome == ACCEPTED

    def as_json(self) -> dict:
        if not self.ok:
            return {"error": self.outcome, "detail": self.detail}
        body = {"outcome": self.outcome, "run_id": self.run_id, "biz_key": self.biz_key, "created": self.created}
        return {**body, **self.extra}


@dataclass
class _Attempt:
    """What is known about an event so far, for the refusal record."""

    source_name: str
    channel: str
    source: TriggerSource | None = None
    delivery_id: str = ""
    body_sha256: str = ""
    body_bytes: int | None = None
    remote_addr: str = ""
    # True once the sender is known: a webhook signed and fresh, or trusted code (Python, queue, file).
    authenticated: bool = False


def webhook_intake(
    *,
    source_name: str,
    headers: Mapping[str, str],
    read_body: Callable[[int], bytes],
    content_length: int | None,
    now: datetime,
    remote_addr: str = "",
) -> IntakeResult:
    """Authenticate and accept one HTTP delivery, or refuse it with a reason.

    1. The source must exist, be enabled and be a webhook source.
    2. The body is refused unread when Content-Length is over the limit, and never read past it.
    3. The source's scheme's headers: timestamp (Unix seconds), delivery id, signature; the source's
       secrets granted, set and strong; one signature matching one secret, compared in constant
       time; then the timestamp within 5 minutes. Only then is the sender authenticated: refusals up
       to here are counted, not stored one by one (_refuse).
    4. The body must be a JSON object we can store; then the common acceptance path (_accept).
    """
    attempt = _Attempt(
        source_name=events.printable(source_name)[:100], channel=TriggerSource.Kind.WEBHOOK, remote_addr=remote_addr
    )
    try:
        events.check_source_name(source_name)
        source = _source(source_name, channel=TriggerSource.Kind.WEBHOOK, attempt=attempt)
        limit = source.max_body_bytes
        if content_length is not None and content_length > limit:
            # The claimed length is only in the detail: it can be any number (over a bigint).
            raise Refused(
                "body_too_large", f"Content-Length {content_length} exceeds this source's {limit} bytes", status=413
            )
        try:
            body = read_body(limit + 1)
        except OSError as exc:  # the client went away mid-body (Django's UnreadablePostError)
            raise Refused("body_unreadable", f"the body could not be read: {exc}") from None
        attempt.body_bytes = len(body)
        if len(body) > limit:
            raise Refused("body_too_large", f"body exceeds this source's {limit} bytes", status=413)
        attempt.body_sha256 = events.body_digest(body)
        scheme = source.signature_scheme
        names = signatures.headers_for(scheme)
        timestamp, delivery_id, signature = (
            _header(headers, name) for name in (names.timestamp, names.delivery, names.signature)
        )
        sent = events.parse_timestamp(timestamp, header=names.timestamp)
        attempt.delivery_id = events.check_delivery_id(delivery_id, header=names.delivery)
        signatures.verify(
            scheme, _secret_keys(source), timestamp=timestamp, delivery_id=delivery_id, body=body, header=signature
        )
        events.check_freshness(sent, now=now, header=names.timestamp)
        attempt.authenticated = True
        payload = events.parse_body(body)
        return _accept(source, payload, attempt=attempt, now=now)
    except Refused as refused:
        return _refuse(attempt, refused, now=now)


def _secret_keys(source: TriggerSource) -> list[bytes]:
    """The HMAC keys of the source's secrets (two during a rotation). Each named secret must be
    granted, set and strong: anything else is our configuration, so 503 (the sender retries later)."""
    keys = []
    for name in source.secret_names():
        value = secret_value(name, WEBHOOK)  # None unless granted, declared for webhook signing, and set
        # The details go to an unauthenticated sender: no variable name, nothing about the value.
        # The source's admin page says which variable and why.
        if value is None:
            raise Refused(
                "secret_unavailable", "this source's secret is not granted or not set on the server", status=503
            )
        try:
            keys.append(signatures.secret_key(source.signature_scheme, value))
        except ValueError:
            raise Refused(
                "secret_weak", "this source's secret is below the minimum strength on the server", status=503
            ) from None
    if not keys:
        raise Refused("secret_unavailable", "this source names no secret", status=503)
    return keys


def event_intake(
    *,
    source: str | TriggerSource,
    payload: object,
    now: datetime,
    delivery_id: str | None = None,
    channel: str = TriggerSource.Kind.PYTHON,
) -> IntakeResult:
    """Accept an event from inside the system (Python caller, queue message, file sensor).

    No signature: the caller is already trusted code. Everything else is as for a webhook:
    source checks, size limit (of the payload as canonical JSON), mapping, replay memory when a
    delivery id is given, and one run per biz_key.
    """
    name = source.name if isinstance(source, TriggerSource) else str(source)
    attempt = _Attempt(source_name=events.printable(name)[:100], channel=channel, authenticated=True)
    try:
        events.check_source_name(name)
        obj = _source(source if isinstance(source, TriggerSource) else name, channel=channel, attempt=attempt)
        if not isinstance(payload, dict):
            raise Refused("malformed_json", f"payload must be a JSON object, got {type(payload).__name__}")
        try:
            body = events.canonical_json(payload)
        except (UnicodeEncodeError, ValueError) as exc:  # a lone surrogate, a circular reference
            raise Refused("malformed_json", f"payload cannot be written as JSON: {exc}") from None
        attempt.body_bytes = len(body)
        attempt.body_sha256 = events.body_digest(body)
        if len(body) > obj.max_body_bytes:
            raise Refused(
                "body_too_large", f"payload is {len(body)} bytes as JSON; the limit is {obj.max_body_bytes}", status=413
            )
        if delivery_id is not None:
            attempt.delivery_id = events.check_delivery_id(str(delivery_id))
        # Round-trip through the webhook's parser, so what the run stores is plain JSON whatever Python
        # objects came in, and NaN, NUL or deep nesting are refused the same way as over HTTP.
        return _accept(obj, events.parse_body(body), attempt=attempt, now=now)
    except Refused as refused:
        return _refuse(attempt, refused, now=now)


def _source(source: str | TriggerSource, *, channel: str, attempt: _Attempt) -> TriggerSource:
    if isinstance(source, str):
        obj = TriggerSource.objects.select_related("rule").filter(name=source).first()
        if obj is None:
            raise Refused("unknown_source", f"no trigger source named {source[:100]!r}", status=404)
    else:
        obj = source
    attempt.source = obj
    if not obj.enabled:
        raise Refused("source_disabled", f"trigger source {obj.name!r} is disabled", status=403)
    if obj.kind != channel:
        raise Refused("wrong_channel", f"trigger source {obj.name!r} is a {obj.kind} source, not {channel}", status=403)
    return obj


def _header(headers: Mapping[str, str], name: str) -> str:
    value = headers.get(name)
    if not value:
        raise Refused("missing_header", f"header {name} is required")
    return value


# An event is a trigger (webhook, queue, Python, file): in the request's or the message's trace when
# it carries one, else a new trace; each file a sensor scan finds starts its own.
@tracing.traced(
    "trigger.event",
    new_trace=lambda source, payload, *, attempt, **_: attempt.channel == "file",
    attributes=lambda source, payload, *, attempt, **_: {
        "harness.rule": source.rule.name,
        "harness.event_source": source.name,
        "harness.channel": attempt.channel,
    },
)
def _accept(source: TriggerSource, payload: dict, *, attempt: _Attempt, now: datetime) -> IntakeResult:
    """Map, render the biz_key, remember the delivery and claim the run, in one transaction.

    The delivery id is remembered by the unique (source, delivery_id) constraint: insert and
    catch the conflict, never check first, so two concurrent copies of a delivery get one answer.
    The same id with the same body is the sender retrying: 200 with the run. The same id with
    another body is a replay: 409, nothing run.
    """
    mapped = events.map_payload(payload, source.mapping())
    rule = source.rule
    if not rule.enabled:
        raise Refused("rule_paused", f"rule {rule.name!r} is paused; the event was not run", status=409)
    delivery_id = attempt.delivery_id or None
    work = work_for_event(rule, source, mapped, channel=attempt.channel, delivery_id=delivery_id, now=now)
    biz_key = work.biz_key
    with transaction.atomic():
        try:
            with transaction.atomic():  # a savepoint, so the conflict leaves the outer transaction usable
                delivery = EventDelivery.objects.create(
                    source=source,
                    delivery_id=delivery_id,
                    channel=attempt.channel,
                    body_sha256=attempt.body_sha256,
                    received_at=now,
                    criteria=mapped.criteria,
                    biz_key=biz_key,
                    run_created=False,
                )
        except IntegrityError:
            earlier = EventDelivery.objects.get(source=source, delivery_id=delivery_id)
            if earlier.body_sha256 != attempt.body_sha256:
                raise Refused(
                    "replayed_delivery",
                    f"delivery {delivery_id!r} was already received at {earlier.received_at:%Y-%m-%dT%H:%M:%SZ} "
                    "with a different body",
                    status=409,
                ) from None
            event_metric_count(source.name, REDELIVERY, now=now)
            earlier_run = TaskRun.objects.filter(pk=earlier.run_id).first() if earlier.run_id else None
            answered = _flow_answer(rule, earlier_run, biz_key=earlier.biz_key)
            if answered is not None:
                return answered
            return IntakeResult(200, REDELIVERY, "this delivery was already accepted", earlier.run_id, earlier.biz_key)
        claim = run_claim(work, now=now)
        delivery.run_id = claim.run.id if claim.run else None
        delivery.run_created = claim.created
        delivery.save(update_fields=["run_id", "run_created"])
        answered = None if claim.created else _flow_answer(rule, claim.run, biz_key=biz_key)
        outcome = answered.outcome if answered else ACCEPTED if claim.created else DUPLICATE
        event_metric_count(source.name, outcome, now=now)
    log.info(
        # %r: the key and the delivery id carry sender values; quoted, a line break cannot forge a log line.
        "event %r from %s: %s run %s %r",
        delivery_id or "-",
        source.name,
        outcome,
        claim.run and claim.run.id,
        biz_key,
    )
    if answered is not None:
        return answered
    assert claim.run is not None  # a shed claim (no run) was answered above
    if claim.replaced:
        replaced = [{"run_id": r.id, "biz_key": r.biz_key} for r in claim.replaced]
        return IntakeResult(202, ACCEPTED, "", claim.run.id, biz_key, extra={"replaced": replaced})
    status = 202 if claim.created else 200
    return IntakeResult(status, outcome, "", claim.run.id, biz_key)


def _flow_answer(rule, run: TaskRun | None, *, biz_key: str) -> IntakeResult | None:
    """The answer for an event that will not run as its own run: shed (no run; its decision) or
    coalesced (its run was replaced; the survivor). None for any other outcome."""
    if run is None:
        decision = Decision.objects.filter(rule=rule, slot=None, biz_key=biz_key).first()
        details = decision.details if decision else {}
        detail = (
            f"shed by backpressure: {details.get('pending')} pending runs in {details.get('pool')}, "
            f"high watermark {details.get('high_watermark')}; recomputable work is not run"
        )
        extra = {"decision_id": decision.id if decision else None, "backpressure": details}
        return IntakeResult(202, SHED, detail, None, biz_key, extra={**extra, "detail": detail})
    if run.state == TaskRun.State.COALESCED:
        decision = Decision.objects.filter(rule=rule, slot=None, biz_key=run.biz_key).first()
        survivor = run_coalesced_into(run)
        extra = {
            "decision_id": decision.id if decision else None,
            "survivor": {"run_id": survivor.id, "biz_key": survivor.biz_key} if survivor else None,
        }
        detail = "replaced by a newer trigger of the same object before it started; the survivor runs instead"
        return IntakeResult(202, COALESCED, detail, run.id, run.biz_key, extra={**extra, "detail": detail})
    return None


def _refuse(attempt: _Attempt, refused: Refused, *, now: datetime) -> IntakeResult:
    """Record and count a refusal; its own transaction, so nothing of the refused event survives.

    An authenticated sender's refusal is kept as a row (auditable). Before authentication anyone can
    send anything, so the refusal is counted (RefusalCount, per source, reason and hour) and only the
    last REFUSAL_SAMPLE per source and reason are kept as rows: a flood adds no rows. The same holds
    for a repeat of an authenticated refusal (one captured signed request replayed, a refused file
    seen again at every scan): the first is the row, the repeats are counted.
    """
    known = attempt.source is not None
    repeat = (
        attempt.authenticated
        and bool(attempt.delivery_id)
        and EventRefusal.objects.filter(
            source=attempt.source,
            reason=refused.code,
            delivery_id=attempt.delivery_id,
            body_sha256=attempt.body_sha256,
            authenticated=True,
        ).exists()
    )
    with transaction.atomic():
        if not repeat:
            _refusal_row(attempt, refused, now=now)
        counted_name = attempt.source_name if known else UNKNOWN_SOURCE_METRIC
        if not attempt.authenticated:
            _sample_trim(attempt.source, refused.code)
        if repeat or not attempt.authenticated:
            refusal_count(counted_name, refused.code, status=refused.status, now=now)
        event_metric_count(counted_name, refused.code, now=now)
    # Never the body or the secret: the sender's data stays out of the logs.
    log.warning(
        "event refused from %r (%s): %s: %r%s",
        attempt.source_name,
        attempt.channel,
        refused.code,
        refused.detail,
        " (a repeat, counted)" if repeat else "",
    )
    return IntakeResult(refused.status, refused.code, refused.detail)


def _refusal_row(attempt: _Attempt, refused: Refused, *, now: datetime) -> None:
    EventRefusal.objects.create(
        source=attempt.source,
        source_name=attempt.source_name,
        channel=attempt.channel,
        reason=refused.code,
        status=refused.status,
        detail=refused.detail,
        delivery_id=attempt.delivery_id,
        body_sha256=attempt.body_sha256,
        body_bytes=attempt.body_bytes,
        remote_addr=attempt.remote_addr[:64],
        authenticated=attempt.authenticated,
        created_at=now,
    )


def _sample_trim(source: TriggerSource | None, reason: str) -> None:
    """Keep the newest REFUSAL_SAMPLE unauthenticated refusals of this source (or of all unknown
    sources together) and reason; delete the older ones."""
    same = EventRefusal.objects.filter(authenticated=False, reason=reason)
    same = same.filter(source=source) if source is not None else same.filter(source__isnull=True)
    older = list(same.order_by("-id").values_list("id", flat=True)[REFUSAL_SAMPLE : REFUSAL_SAMPLE + 100])
    if older:
        EventRefusal.objects.filter(id__in=older).delete()


def refusal_count(source_name: str, reason: str, *, status: int, now: datetime) -> None:
    """Add one to the hour's counter: update, or insert and catch the conflict (never check first)."""
    hour = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    same = RefusalCount.objects.filter(source_name=source_name, reason=reason, hour=hour)
    if same.update(count=F("count") + 1, last_at=now):
        return
    try:
        with transaction.atomic():
            RefusalCount.objects.create(
                source_name=source_name, reason=reason, status=status, hour=hour, count=1, last_at=now
            )
    except IntegrityError:  # another intake created the hour's row first
        same.update(count=F("count") + 1, last_at=now)


def event_metric_count(source_name: str, outcome: str, *, now: datetime) -> None:
    with transaction.atomic():
        metric, _ = EventMetric.objects.get_or_create(
            source_name=source_name, outcome=outcome, defaults={"last_at": now}
        )
        # Increment in SQL, so concurrent intakes never lose a count.
        EventMetric.objects.filter(pk=metric.pk).update(count=F("count") + 1, last_at=now)


def event_records_prune(*, now: datetime, keep: timedelta = EVENT_RECORD_RETENTION) -> int:
    """Delete deliveries and refusals older than `keep` (bounded retention); return how many."""
    cutoff = now - keep
    deliveries, _ = EventDelivery.objects.filter(received_at__lt=cutoff).delete()
    refusals, _ = EventRefusal.objects.filter(created_at__lt=cutoff).delete()
    counts, _ = RefusalCount.objects.filter(hour__lt=cutoff).delete()
    return deliveries + refusals + counts
