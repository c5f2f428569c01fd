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


class ApiToken(models.Model):
    """A bearer token for the HTTP API; it acts with its user's permissions. Only the hash is stored."""

    name = models.CharField(_("name"), max_length=100)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", verbose_name=_("user")
    )
    token_hash = models.CharField(_("token hash"), max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(_("created at"))
    last_used_at = models.DateTimeField(_("last used at"), null=True, blank=True)

    class Meta:
        verbose_name = _("API token")
        verbose_name_plural = _("API tokens")
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
