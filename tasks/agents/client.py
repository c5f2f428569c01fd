"""The model client: one place where the harness talks to a model provider.

`chat()` speaks OpenAI-compatible chat completions over httpx (or answers locally for the built-in
`echo` provider) and maps every failure to an error kind:

    429                     → rate_limited (Retry-After honoured as a floor on the next delay)
    5xx                     → dependency_unreachable
    401 / 403               → permission_denied
    400, other 4xx          → invalid_param
    connect error / timeout → dependency_unreachable
    read timeout            → timeout
    body not chat JSON      → model_invalid_output (raw text attached)

runs/engine/calls.py wraps it for a run: checks the agent's budget, then records one ExternalCall row per
call, with a SHA-256 of the input and never the key (nor the prompt, unless the agent opts in).
The API key is read at call time from the variable the agent names, only if the deployment granted
that variable, and sent only to a base URL the deployment allows (tasks/secrets.py), connected to an
address checked at call time (tasks/outbound.py); it is redacted
from anything the provider sends back before it can reach an error message, a log or a ticket.
"""

import hashlib
import json
import os
import ssl
import threading
import weakref
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any

import httpx

from harness_site.tracing import outgoing_headers
from tasks import outbound
from tasks.agents.redaction import redact
from tasks.secrets import MODEL, NAME, agent_url_error, secret_use_refusal, secret_value
from tasks.skills.sdk import ErrorKind, SkillError

MAX_RAW_OUTPUT = 20_000
MAX_ERROR_BODY = 500

_tls: ssl.SSLContext | None = None
_tls_lock = threading.Lock()
_per_thread = threading.local()


def http_client() -> httpx.Client:
    """This thread's HTTP client for model calls. A thread makes one call at a time, and keeps its
    connection to the provider alive for its next call. One client per thread, not per process:
    httpcore's pool scans every connection it holds on every call, and closes idle connections while
    it holds more than its keep-alive limit (encode/httpcore#1035), so a thousand runs waiting on
    one shared client cost milliseconds of CPU per call and reconnect. The clients share one TLS
    context: loading the CA bundle costs about 20 ms of CPU. A client keeps no cookies, so one
    agent's session never rides along with another agent's key; each call sets its own timeouts
    and headers."""
    client = getattr(_per_thread, "client", None)
    if client is None:
        client = _per_thread.client = httpx.Client(
            verify=_tls_context(),
            follow_redirects=False,
            cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=1),
        )
        # Closed with its thread (or at exit): a thread that ends leaves no connection open.
        weakref.finalize(threading.current_thread(), client.close)
    return client


def _tls_context() -> ssl.SSLContext:
    global _tls
    if _tls is None:
        with _tls_lock:
            if _tls is None:
                _tls = httpx.create_ssl_context()
    return _tls


def _forget_http_clients() -> None:
    # A forked pool child must not share its parent's sockets.
    global _per_thread
    _per_thread = threading.local()


os.register_at_fork(after_in_child=_forget_http_clients)


class ModelCallError(SkillError):
    """A failed model call, with what the executor and the dead-letter desk need."""

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        raw_output: str = "",
    ):
        super().__init__(kind, message)
        self.status = status
        self.retry_after = retry_after  # read by runs.engine.executor.run_execute
        self.raw_output = raw_output[:MAX_RAW_OUTPUT]  # attached to the dead-letter ticket


@dataclass(frozen=True)
class ModelReply:
    content: str
    status: int | None
    prompt_tokens: int | None
    completion_tokens: int | None


def kind_for_status(status: int) -> str | None:
    """The error kind of an HTTP status, or None for success."""
    if 200 <= status < 300:
        return None
    if status == 429:
        return ErrorKind.RATE_LIMITED
    if status >= 500:
        return ErrorKind.DEPENDENCY_UNREACHABLE
    if status in (401, 403):
        return ErrorKind.PERMISSION_DENIED
    if status == 408:
        return ErrorKind.TIMEOUT
    return ErrorKind.INVALID_PARAM


def parse_retry_after(value: str | None, *, now: datetime) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date); None if absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():  # str.isdigit() also accepts ² and other scripts' digits
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max((when - now).total_seconds(), 0.0)


def input_sha256(model: str, messages: list[dict[str, str]]) -> str:
    text = json.dumps({"model": model, "messages": messages}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def api_key(agent) -> str:
    """The key from the granted environment variable the agent names. Raises invalid_param if the
    variable is not granted, not declared a model key for the agent's base URL (tasks/secrets.py) or
    unset; the message names the variable, never a value."""
    name = agent.api_key_env or ""
    refused = secret_use_refusal(name, MODEL, url=agent.base_url)
    if refused is not None:
        shown = name if NAME.fullmatch(name) else "(not a variable name)"  # never echo what may be a pasted key
        raise ModelCallError(ErrorKind.INVALID_PARAM, f"agent {agent.name!r}: key variable {shown}: {refused.text}")
    value = secret_value(name, MODEL, url=agent.base_url)
    if not value:
        raise ModelCallError(
            ErrorKind.INVALID_PARAM,
            f"agent {agent.name!r}: environment variable {agent.api_key_env or '(none)'} is not set in the worker",
        )
    return value


def build_messages(agent, prompt: str) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": agent.system_prompt}] if agent.system_prompt else []
    messages.append({"role": "user", "content": prompt})
    return messages


def chat(agent, messages: list[dict[str, str]], *, now: datetime) -> ModelReply:
    """One chat-completions call for `agent`. Raises ModelCallError with the mapped kind."""
    if agent.provider == "echo":
        return _echo(agent, messages)
    refused = agent_url_error(agent.base_url)
    if refused is not None:
        raise ModelCallError(ErrorKind.INVALID_PARAM, f"agent {agent.name!r}: base URL {agent.base_url}: {refused}")
    key = api_key(agent)
    url = agent.base_url.rstrip("/") + "/chat/completions"
    timeout = httpx.Timeout(
        connect=agent.connect_timeout_seconds,
        read=agent.read_timeout_seconds,
        write=agent.read_timeout_seconds,
        pool=agent.connect_timeout_seconds,
    )
    body: dict[str, Any] = {"model": agent.model, "messages": messages}
    try:
        # traceparent: the provider's logs and traces can name the run's trace (W3C Trace Context).
        headers = {**outgoing_headers(), "Authorization": f"Bearer {key}"}
        # Connected to the address checked for the host (tasks/outbound.py): no name may lead to
        # loopback or a metadata service, however it resolves on a second lookup.
        response = outbound.send(http_client(), "POST", url, json=body, headers=headers, timeout=timeout)
    except outbound.OutboundRefused as exc:
        raise ModelCallError(ErrorKind.INVALID_PARAM, f"{url}: refused, {exc}") from None
    except httpx.ReadTimeout:
        raise ModelCallError(
            ErrorKind.TIMEOUT, f"{url}: no response within the read timeout of {agent.read_timeout_seconds:g}s"
        ) from None
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
        raise ModelCallError(
            ErrorKind.DEPENDENCY_UNREACHABLE, f"{url}: cannot connect: {redact(str(exc), key)}"
        ) from None
    except httpx.HTTPError as exc:  # the connection broke mid-exchange (reset, protocol error, write timeout)
        raise ModelCallError(
            ErrorKind.DEPENDENCY_UNREACHABLE, f"{url}: {type(exc).__name__}: {redact(str(exc), key)}"
        ) from None
    # Every text the provider sends back passes redact() here, before anything else can read it.
    text = redact(response.text, key)
    kind = kind_for_status(response.status_code)
    if kind is not None:
        retry_after = parse_retry_after(response.headers.get("retry-after"), now=now)
        raise ModelCallError(
            kind,
            f"{url}: HTTP {response.status_code}: {text[:MAX_ERROR_BODY]}",
            status=response.status_code,
            retry_after=retry_after,
        )
    return _parse_completion(url, response.status_code, text, key)


def _parse_completion(url: str, status: int, text: str, key: str) -> ModelReply:
    try:
        data = json.loads(text)
        content = data["choices"][0]["message"]["content"]
        if not isinstance(content, str):
            raise TypeError("content is not a string")
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise ModelCallError(
            ErrorKind.MODEL_INVALID_OUTPUT,
            f"{url}: response is not a chat completion ({type(exc).__name__}: {exc})",
            status=status,
            raw_output=text,
        ) from None
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    return ModelReply(
        content=redact(content, key),  # again once decoded: JSON decoding turns \u escapes back into text
        status=status,
        prompt_tokens=_count(usage.get("prompt_tokens")),
        completion_tokens=_count(usage.get("completion_tokens")),
    )


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _echo(agent, messages: list[dict[str, str]]) -> ModelReply:
    """The built-in echo provider: no network, no key. A user message that is a JSON object comes back
    as itself; any other text comes back as {"echo": text}. Token counts are whitespace words."""
    prompt = messages[-1]["content"] if messages else ""
    try:
        parsed = json.loads(prompt)
    except ValueError:
        parsed = None
    reply = parsed if isinstance(parsed, dict) else {"echo": prompt}
    content = json.dumps(reply, sort_keys=True)
    return ModelReply(
        content=content, status=None, prompt_tokens=len(prompt.split()), completion_tokens=len(content.split())
    )
