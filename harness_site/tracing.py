"""One trace per trigger, from its entry to the model call (docs/observability.md).

A trace id is born at every trigger entry (a tick's slot, an event from a webhook, a queue, a file or
Python, an operator's button, the API) and is kept on the run (`TaskRun.trace_id`, set in one place:
`runs.engine.claims.Work`) and its dead-letter ticket. It travels in the "execute run" message as a W3C
`traceparent` header, is bound again by the worker from the run row (the row is the truth, the
header a hint: a re-dispatch by the sweeper carries the sweep's context), appears on every log line
(harness_site/logs.py) and goes to model providers as `traceparent`.

The ids are OpenTelemetry's: the current span context is the current trace. Without the SDK
(the default) nothing is recorded: the API's no-op tracer passes the context through, and a
stand-in span carries a fresh id where no trace exists yet. With the standard OTEL_* variables set,
`otel_configure()` installs the SDK, an exporter and the Django and Celery instrumentation, and
our spans (trigger, run.claim, run.attempt, run.step, model.call) are exported.
"""

import contextvars
import functools
import logging
import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, format_span_id, format_trace_id
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger("harness.tracing")

TRACER_NAME = "agent-harness"
SERVICE_NAME = "agent-harness"
TRACEPARENT = "traceparent"
_PROPAGATOR = TraceContextTextMapPropagator()
# A TracerProvider of our own choosing (otel_configure, or a test's in-memory one); None: the global
# provider, which is the API's no-op until an SDK is installed.
_provider: Any = None
# Set when opentelemetry-instrumentation-celery runs in this process: it then owns each task's context.
_celery_instrumented = False

# The work in hand, for log lines: run id, biz_key, rule, attempt (the trace id is the span context's).
LOG_FIELDS = ("run_id", "biz_key", "rule", "attempt")
_fields: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("harness_log_fields", default={})  # noqa: B039
# Span attributes that are also log fields.
_ATTRIBUTE_FIELDS = {f"harness.{name}": name for name in LOG_FIELDS}


def new_trace_id() -> str:
    """A random W3C trace id: 32 lowercase hex digits, never all zeros."""
    return format_trace_id(secrets.randbits(128) or 1)


def current_trace_id() -> str:
    """The current trace's id, or "" outside any trace."""
    ctx = trace.get_current_span().get_span_context()
    return format_trace_id(ctx.trace_id) if ctx.is_valid else ""


def trace_id_here() -> str:
    """The trace a trigger's work belongs to: the current one (the HTTP request's, the queue
    message's, the trigger span's), or a new one when there is none."""
    return current_trace_id() or new_trace_id()


def log_fields() -> dict[str, Any]:
    """The trace and work fields of the current context, for a log record."""
    ctx = trace.get_current_span().get_span_context()
    fields = dict(_fields.get())
    if ctx.is_valid:
        fields["trace_id"] = format_trace_id(ctx.trace_id)
        fields["span_id"] = format_span_id(ctx.span_id)
    return fields


def bind(**fields: Any) -> None:
    """Add work fields (run_id, biz_key, rule, attempt) to the current context's log lines; the
    scope that set up the context (runs.engine.executor via `scoped`, a Celery task) drops them again."""
    _fields.set({**_fields.get(), **{k: v for k, v in fields.items() if v is not None}})


def run_bind(run) -> None:
    """The worker's side of a run: its fields on every log line, and the run's trace as the current
    one (its stored trace id wins over whatever context the message carried)."""
    bind(run_id=run.id, biz_key=run.biz_key, rule=run.rule_name or None)
    if run.trace_id:
        otel_context.attach(_context_in(run.trace_id))  # undone by the enclosing `scoped` copy


def scoped(fn: Callable) -> Callable:
    """Run `fn` in a copy of the current context, so what it binds (fields, the run's trace) ends with it."""

    @functools.wraps(fn)
    def inner(*args, **kwargs):
        return contextvars.copy_context().run(fn, *args, **kwargs)

    return inner


def _new_span_id() -> int:
    return secrets.randbits(64) or 1


def _context_in(trace_id: str):
    """A context whose current span is in `trace_id`: the current context if it is already in that
    trace, else one with a stand-in remote parent of that trace."""
    current = trace.get_current_span().get_span_context()
    if current.is_valid and format_trace_id(current.trace_id) == trace_id:
        return otel_context.get_current()
    parent = SpanContext(
        trace_id=int(trace_id, 16), span_id=_new_span_id(), is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)
    )
    return trace.set_span_in_context(NonRecordingSpan(parent))


def _tracer():
    return (_provider or trace.get_tracer_provider()).get_tracer(TRACER_NAME)


def _no_sdk() -> bool:
    """Whether the global tracer provider is still the API's own (no SDK installed: nothing records)."""
    return isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider)


@contextmanager
def otel_context_use(ctx) -> Iterator[None]:
    """`ctx` as the current context inside the block."""
    token = otel_context.attach(ctx)
    try:
        yield
    finally:
        otel_context.detach(token)


@contextmanager
def span(
    name: str, *, trace_id: str | None = None, new_trace: bool = False, attributes: dict | None = None
) -> Iterator[Any]:
    """Our span `name`: a child of the current span; in trace `trace_id` when given; the root of a
    new trace with `new_trace`. A valid span context is current inside, SDK or not."""
    if new_trace:
        parent = otel_context.Context()
    elif trace_id:
        parent = _context_in(trace_id)
    else:
        parent = None
    attributes = {k: v for k, v in (attributes or {}).items() if v is not None}
    token = _fields.set(
        {**_fields.get(), **{_ATTRIBUTE_FIELDS[k]: v for k, v in attributes.items() if k in _ATTRIBUTE_FIELDS}}
    )
    try:
        if _provider is None and not new_trace and _no_sdk():
            # No SDK (the default): the API's no-op tracer would only make the parent span current
            # again (NoOpTracer.start_span returns a NonRecordingSpan parent as it is). Do that
            # directly: a span per claim and per attempt was a tenth of the worker's own CPU.
            current_span = trace.get_current_span(parent)
            if isinstance(current_span, NonRecordingSpan) and current_span.get_span_context().is_valid:
                if parent is None:
                    yield current_span
                else:
                    with otel_context_use(parent):
                        yield current_span
                return
        with _tracer().start_as_current_span(name, context=parent, attributes=attributes) as current:
            if current.get_span_context().is_valid:
                yield current
                return
            # No SDK and no trace yet: a stand-in span carries the new trace's id (nothing is recorded).
            stand_in = NonRecordingSpan(
                SpanContext(
                    trace_id=int(trace_id or new_trace_id(), 16),
                    span_id=_new_span_id(),
                    is_remote=False,
                    trace_flags=TraceFlags(TraceFlags.SAMPLED),
                )
            )
            with trace.use_span(stand_in):
                yield stand_in
    finally:
        _fields.reset(token)


_P = ParamSpec("_P")
_R = TypeVar("_R")


def traced(
    name: str,
    *,
    attributes: Callable[..., dict[str, Any]] | None = None,
    trace_of: Callable[..., str] | None = None,
    new_trace: Callable[..., bool] | bool = False,
) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Decorate a function with `span(name)`; the callables take the function's arguments. The
    decorated function keeps its signature for the type checker."""

    def wrap(fn: Callable[_P, _R]) -> Callable[_P, _R]:
        @functools.wraps(fn)
        def inner(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            with span(
                name,
                trace_id=trace_of(*args, **kwargs) if trace_of else None,
                new_trace=new_trace(*args, **kwargs) if callable(new_trace) else new_trace,
                attributes=attributes(*args, **kwargs) if attributes else None,
            ):
                return fn(*args, **kwargs)

        return inner

    return wrap


def outgoing_headers() -> dict[str, str]:
    """W3C trace-context headers for a call made now (a Celery message, a model provider): empty outside a trace."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier


def headers_for(trace_id: str) -> dict[str, str]:
    """W3C trace-context headers for a message sent for trace `trace_id` from outside its span (a
    batch of claims sends each run's message in the run's own trace)."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=_context_in(trace_id))
    return carrier


def context_from_headers(headers: dict) -> Any:
    """The context a received `traceparent` (and `tracestate`) describe; the current one if none is valid."""
    return _PROPAGATOR.extract({k: v for k, v in headers.items() if isinstance(v, str)})


# --- Celery: the consumer's side of the message header --------------------------------------------


def task_enter(task) -> None:
    """At task start: the message's traceparent becomes the current context, unless the Celery
    instrumentation does that itself (its span is the task's, with the same parent). Undone by task_exit."""
    request = getattr(task, "request", None)
    headers = getattr(request, "headers", None) or {}
    value = getattr(request, TRACEPARENT, None) or headers.get(TRACEPARENT)
    tokens: list[contextvars.Token[Any]] = [_fields.set({})]
    if isinstance(value, str) and not _celery_instrumented:
        tokens.append(otel_context.attach(context_from_headers({TRACEPARENT: value})))
    if request is not None:
        request.harness_trace_tokens = tokens


def task_exit(task) -> None:
    request = getattr(task, "request", None)
    tokens = getattr(request, "harness_trace_tokens", None) or []
    for token in reversed(tokens[1:]):
        otel_context.detach(token)
    if tokens:
        _fields.reset(tokens[0])
    if request is not None:
        request.harness_trace_tokens = None


# --- Optional OpenTelemetry export --------------------------------------------------------------


def otel_enabled(environ=os.environ) -> bool:
    """True when the standard OTEL_* variables ask for traces: an OTLP endpoint, or an exporter other
    than none; OTEL_SDK_DISABLED=true wins."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    return bool(
        exporter or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def use_provider(provider) -> None:
    """Record spans with `provider` (None: back to the global one). For otel_configure and tests."""
    global _provider
    _provider = provider


def otel_configure(*, django: bool = False, celery: bool = False, environ=os.environ) -> bool:
    """Install the SDK with the exporter OTEL_TRACES_EXPORTER names (otlp, the default, or console),
    plus the Django and/or Celery instrumentation, when otel_enabled(). Once per process; after a
    fork for Celery's pool processes (the exporter's thread does not survive one). True if installed."""
    if not otel_enabled(environ) or _provider is not None:
        return False
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

    exporter: SpanExporter
    exporter_name = environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    if exporter_name == "console":
        exporter = ConsoleSpanExporter()
    elif exporter_name == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()  # reads OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, _HEADERS, _TIMEOUT
    else:
        log.warning("OTEL_TRACES_EXPORTER=%s: only otlp (http/protobuf) and console are installed", exporter_name)
        return False
    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the default name.
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    use_provider(provider)
    if django:
        from opentelemetry.instrumentation.django import DjangoInstrumentor

        DjangoInstrumentor().instrument(tracer_provider=provider)
    if celery:
        from opentelemetry.instrumentation.celery import CeleryInstrumentor

        global _celery_instrumented
        CeleryInstrumentor().instrument(tracer_provider=provider)
        _celery_instrumented = True
    log.info("OpenTelemetry traces exported with %s", exporter_name)
    return True
