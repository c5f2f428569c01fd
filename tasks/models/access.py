"""Who may do what: executing identities and API tokens."""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils.translation import gettext_lazy as _

from tasks.skills.sdk import registry


class ServiceIdentity(models.Model):
    """The identity a rule's runs execute as, with the skills it may run (least privilege)."""

    name = models.SlugField(_("name"), max_length=100, unique=True)
    description = models.CharField(_("description"), max_length=500, blank=True)
    allowed_skills = models.JSONField(
        _("allowed skills"), default=list, blank=True, help_text=_('Skill names, e.g. ["harness.noop"].')
    )
    enabled = models.BooleanField(_("enabled"), default=True)

    class Meta:
        ordering = ["name"]
        verbose_name = _("service identity")
        verbose_name_plural = _("service identities")

    def __str__(self) -> str:
        return self.name

    def may_run(self, skill: str) -> bool:
        return self.enabled and isinstance(self.allowed_skills, list) and skill in self.allowed_skills

    def clean(self) -> None:
        if not isinstance(self.allowed_skills, list) or not all(isinstance(s, str) for s in self.allowed_skills):
            raise ValidationError({"allowed_skills": 'A JSON list of skill names, e.g. ["harness.noop"].'})
        unknown = [s for s in self.allowed_skills if s not in registry]
        if unknown:
            raise ValidationError(
                {"allowed_skills": f"Unknown skill {unknown[0]!r}. Registered: " + ", ".join(registry.names()) + "."}
            )


# What a token may touch in the HTTP APIs (/api/v1/ in harness_site/api, and /api/flags): an area and read
# or write.
# A token acts with its user's permissions narrowed to its scopes; "*" is every scope.
API_SCOPES = (
    "rules:read",
    "rules:write",
    "runs:read",
    "runs:write",
    "deadletters:read",
    "deadletters:write",
    # The readiness-flag and heartbeat-ping API (tasks/views.py): GET /api/flags reads, the rest write.
    "flags:read",
    "flags:write",
)
ALL_SCOPES = "*"


def default_scopes() -> list[str]:
    return [ALL_SCOPES]


class ApiToken(models.Model):
    """A bearer token for the HTTP API; it acts with its user's permissions, narrowed to its scopes
    in the REST API. Only the hash is stored."""

    name = models.CharField(_("name"), max_length=100)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", verbose_name=_("user")
    )
    token_hash = models.CharField(_("token hash"), max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(_("created at"))
    last_used_at = models.DateTimeField(_("last used at"), null=True, blank=True)
    scopes = models.JSONField(
        _("scopes"),
        default=default_scopes,
        blank=True,
        help_text=_('API scopes, e.g. ["rules:read", "runs:write"]; ["*"]: all of its user\'s permissions.'),
    )

    class Meta:
        verbose_name = _("API token")
        verbose_name_plural = _("API tokens")
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def allows(self, scope: str) -> bool:
        return isinstance(self.scopes, list) and (ALL_SCOPES in self.scopes or scope in self.scopes)

    def clean(self) -> None:
        if not isinstance(self.scopes, list) or any(s not in (*API_SCOPES, ALL_SCOPES) for s in self.scopes):
            raise ValidationError({"scopes": "A JSON list of scopes among: " + ", ".join((ALL_SCOPES, *API_SCOPES))})
