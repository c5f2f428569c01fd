"""Agent admin: model bindings, with whether the key's variable is set and spend against budget.

Shows the NAME of the key's environment variable and, if the deployment granted it, whether it is set
in this process; never a value."""

from typing import Any

from django import forms
from django.contrib import admin
from django.http import QueryDict
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from harness_site.desk import JSON_FORMFIELDS
from runs.engine.calls import agent_spend
from tasks.agents.budgets import budget_window
from tasks.models.agent import ENV_NAME, ENV_NAME_MESSAGE, Agent
from tasks.secrets import MODEL, secret_name_error, secret_use_refusal, secret_value


class HttpsURLField(forms.URLField):
    """A URL typed without a scheme means https (Django 6's default, chosen now)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("assume_scheme", "https")
        super().__init__(**kwargs)


class AgentForm(forms.ModelForm):
    class Meta:
        model = Agent
        fields = "__all__"  # noqa: DJ007  (the admin's fieldsets choose what shows)
        field_classes = {"base_url": HttpsURLField}

    def clean_api_key_env(self) -> str:
        value = self.cleaned_data.get("api_key_env", "")
        if value and not ENV_NAME.fullmatch(value):
            raise forms.ValidationError(ENV_NAME_MESSAGE)
        return value

    def clean(self) -> dict[str, Any]:
        super().clean()
        if "api_key_env" in self.errors:
            # Whatever was wrong (bad name, too long), it may be a pasted key: never render it back.
            data = self.data.copy() if isinstance(self.data, QueryDict) else dict(self.data)
            data[self.add_prefix("api_key_env")] = ""
            self.data = data
        return self.cleaned_data


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    form = AgentForm
    formfield_overrides = JSON_FORMFIELDS  # deep, NUL or absurd JSON is a form message
    list_display = (
        "name",
        "provider_label",
        "model",
        "base_url",
        "api_key_env",
        "key_state",
        "calls_this_hour",
        "tokens_this_hour",
        "store_prompts",
    )
    list_filter = ("provider", "store_prompts")
    search_fields = ("name", "model", "base_url")
    readonly_fields = ("created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("name", "provider", "base_url", "model", "api_key_env")}),
        (
            _("Behaviour"),
            {
                "fields": (
                    "system_prompt",
                    "allowed_tools",
                    "connect_timeout_seconds",
                    "read_timeout_seconds",
                    "store_prompts",
                )
            },
        ),
        (_("Budget per hour"), {"fields": ("max_calls_per_hour", "max_tokens_per_hour")}),
        (_("Provider limit"), {"fields": ("pool",)}),
        (_("State"), {"fields": ("created_at", "updated_at")}),
    )

    @admin.display(description=_("provider"), ordering="provider")
    def provider_label(self, agent: Agent) -> str:
        return (
            gettext("ECHO (demo, no network)") if agent.provider == Agent.Provider.ECHO else gettext("chat completions")
        )

    @admin.display(description=_("key variable"))
    def key_state(self, agent: Agent) -> str:
        # Looked up only for a granted name: the page must not tell whether SECRET_KEY or HOME is set.
        if agent.provider == Agent.Provider.ECHO:
            return "-"
        if secret_name_error(agent.api_key_env or "") is not None:
            return gettext("not granted")
        if secret_use_refusal(agent.api_key_env, MODEL) is not None:
            return gettext("not declared a model key")
        return gettext("set") if secret_value(agent.api_key_env, MODEL) else gettext("not set")

    @admin.display(description=_("calls this hour / budget"))
    def calls_this_hour(self, agent: Agent) -> str:
        spend = agent_spend(agent_id=agent.id, now=timezone.now())
        return f"{spend.calls} / {agent.max_calls_per_hour if agent.max_calls_per_hour is not None else '∞'}"

    @admin.display(description=_("tokens this hour / budget"))
    def tokens_this_hour(self, agent: Agent) -> str:
        now = timezone.now()
        spend = agent_spend(agent_id=agent.id, now=now)
        limit = agent.max_tokens_per_hour if agent.max_tokens_per_hour is not None else "∞"
        return gettext("%(spent)s / %(limit)s (resets %(at)s UTC)") % {
            "spent": spend.tokens,
            "limit": limit,
            "at": f"{budget_window(now)[1]:%H:%M}",
        }
