"""Agents: model bindings that skills call through tasks.agents.client.

An agent names the environment variable that holds its API key, never the key itself: the key is
read from the process environment at call time and never written to the database, a log, a
recorded call or a ticket. The name must be one the deployment granted, and the base URL one it
allows (tasks/secrets.py, docs/secrets.md).
"""

import re
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from tasks.outbound import plain_url_error
from tasks.secrets import (
    MODEL,
    agent_url_error,
    secret_name_error,
    secret_use_message,
    secret_use_refusal,
)

# Matched whole (fullmatch): `$` would also accept a trailing newline.
ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")
# Real key formats (sk-…, long base64) never match ENV_NAME, but an all-caps token could: a name
# this long is far more likely a pasted key than a variable someone typed.
ENV_NAME_MAX = 64
ENV_NAME_MESSAGE = _(
    "Give the NAME of an environment variable (capitals, digits and _, e.g. HARNESS_SECRET_OPENAI), not the key itself."
)


def not_granted_message() -> str:
    return _(
        "Not granted: this deployment hands out only variables named %(prefix)s… or listed in HARNESS_SECRETS."
    ) % {"prefix": settings.HARNESS_SECRET_PREFIX}


def url_not_plain_message() -> Promise:
    return _(
        "Not a plain URL: no ; path parameters, backslashes, percent-encoded separators or dots, . or .. "
        "segments, or characters outside ASCII. Give the endpoint root as the provider documents it."
    )


def url_not_allowed_message() -> Promise:
    return _("Not allowed: this deployment sends agent keys only to the URLs listed in HARNESS_AGENT_URL_ALLOW.")


class Agent(models.Model):
    class Provider(models.TextChoices):
        OPENAI = "openai", _("OpenAI-compatible chat completions (HTTP)")
        ECHO = "echo", _("Built-in echo (demo: no network, no key, echoes the input as JSON)")

    name = models.SlugField(_("name"), max_length=100, unique=True)
    provider = models.CharField(_("provider"), max_length=20, choices=Provider.choices, default=Provider.OPENAI)
    base_url = models.URLField(
        _("base url"),
        blank=True,
        help_text=_("Endpoint root, e.g. https://api.example.com/v1 (…/chat/completions is appended)."),
    )
    model = models.CharField(_("model"), max_length=200, help_text=_("Model name sent to the provider."))
    api_key_env = models.CharField(
        max_length=ENV_NAME_MAX,
        blank=True,
        verbose_name=_("API key environment variable"),
        help_text=_(
            "The NAME of the environment variable that holds the key (e.g. HARNESS_SECRET_OPENAI), never the key. "
            "Only variables the deployment granted are accepted."
        ),
    )
    system_prompt = models.TextField(_("system prompt"), blank=True)
    allowed_tools = models.JSONField(
        _("allowed tools"),
        default=list,
        blank=True,
        help_text=_("Tool names this agent may use."),
    )
    connect_timeout_seconds = models.FloatField(
        _("connect timeout seconds"),
        default=5.0,
        validators=[MinValueValidator(0.1)],
    )
    read_timeout_seconds = models.FloatField(
        _("read timeout seconds"),
        default=60.0,
        validators=[MinValueValidator(0.1)],
    )
    max_calls_per_hour = models.PositiveIntegerField(
        _("max calls per hour"),
        null=True,
        blank=True,
        help_text=_("Empty: no call budget."),
    )
    max_tokens_per_hour = models.PositiveIntegerField(
        _("max tokens per hour"),
        null=True,
        blank=True,
        help_text=_("Empty: no token budget."),
    )
    # The provider's limit (requests per period, concurrent calls): every model call of a run using
    # this agent draws from it, and a 429 Retry-After pauses it.
    pool = models.ForeignKey(
        "tasks.Pool",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="agents",
        verbose_name=_("pool"),
        help_text=_("The provider's rate limit as a pool; model calls draw from it and a 429 pauses it."),
    )
    store_prompts = models.BooleanField(
        _("store prompts"),
        default=False,
        help_text=_("Keep prompt text on recorded calls (off: only a SHA-256 of the input is kept)."),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        ordering = ["name"]
        app_label = "tasks"
        verbose_name = _("agent")
        verbose_name_plural = _("agents")

    def __str__(self) -> str:
        return f"{self.name} (echo)" if self.provider == self.Provider.ECHO else self.name

    def clean(self) -> None:
        errors: dict[str, list[str | Promise]] = {}
        if self.provider == self.Provider.OPENAI:
            if not self.base_url:
                errors.setdefault("base_url", []).append(_("An HTTP provider needs a base URL."))
            if not self.api_key_env:
                errors.setdefault("api_key_env", []).append(
                    _("Name the environment variable that holds the key, e.g. HARNESS_SECRET_OPENAI.")
                )
        if self.base_url:
            parts = urlsplit(self.base_url)
            if parts.query or parts.username or parts.password:
                # Credentials in a URL would be stored here and logged with every request.
                errors.setdefault("base_url", []).append(
                    _("No query string or user:password in the URL: keys go in the environment variable.")
                )
            elif plain_url_error(self.base_url) is not None:
                errors.setdefault("base_url", []).append(url_not_plain_message())
            elif agent_url_error(self.base_url) is not None:
                errors.setdefault("base_url", []).append(url_not_allowed_message())
        if self.api_key_env and not ENV_NAME.fullmatch(self.api_key_env):
            # Do not echo the value back: it may be a pasted key.
            errors.setdefault("api_key_env", []).append(ENV_NAME_MESSAGE)
        elif self.api_key_env and secret_name_error(self.api_key_env) is not None:
            errors.setdefault("api_key_env", []).append(not_granted_message())
        elif self.api_key_env and self.provider == self.Provider.OPENAI:
            # The key must be declared a model key, for this base URL when that URL is itself allowed
            # (a refused URL has its own message above).
            url = self.base_url if self.base_url and agent_url_error(self.base_url) is None else None
            if (refused := secret_use_refusal(self.api_key_env, MODEL, url=url)) is not None:
                errors.setdefault("api_key_env", []).append(secret_use_message(refused))
        if not isinstance(self.allowed_tools, list) or not all(isinstance(t, str) for t in self.allowed_tools):
            errors.setdefault("allowed_tools", []).append(_('A JSON list of tool names, e.g. ["search"].'))
        if errors:
            raise ValidationError(errors)


# Skills that call the rule's agent and validate against its output schema.
AGENT_SKILLS = frozenset({"llm_json"})


def rule_agent_errors(rule) -> dict[str, list[str | Promise]]:
    """Field messages for a rule's agent and output schema: the schema must itself be a valid
    JSON Schema, and a skill that calls a model needs an agent."""
    errors: dict[str, list[str | Promise]] = {}
    schema = rule.output_schema
    if schema is not None:
        if not isinstance(schema, dict | bool):
            errors["output_schema"] = [_('A JSON Schema object, e.g. {"type": "object", "required": ["summary"]}.')]
        else:
            try:
                Draft202012Validator.check_schema(schema)
            except SchemaError as exc:
                where = "/".join(str(p) for p in exc.path) or _("(top level)")
                errors["output_schema"] = [
                    _("Not a valid JSON Schema at %(where)s: %(error)s") % {"where": where, "error": exc.message}
                ]
    if rule.skill in AGENT_SKILLS and getattr(rule, "agent", None) is None:
        errors["agent"] = [_("Skill %(skill)s calls a model: choose the agent it uses.") % {"skill": repr(rule.skill)}]
    return errors
