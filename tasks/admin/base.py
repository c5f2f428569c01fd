"""What the rule desk's mixins are mixed into, and the form page their buttons share.

Each mixin (guards, objectives, review, backfill, the desk) ends up in TriggerRuleAdmin
(tasks/admin/__init__.py), a ModelAdmin of TriggerRule: the type checker reads them as one.
"""

from typing import TYPE_CHECKING, Any

from django.http import HttpRequest
from django.template.response import TemplateResponse

from harness_site.desk import FORM_TEMPLATE, change_url
from tasks.models import TriggerRule

if TYPE_CHECKING:
    from django.contrib import admin

    _RuleModelAdmin = admin.ModelAdmin[TriggerRule]
else:
    _RuleModelAdmin = object


class RuleAdminBase(_RuleModelAdmin):
    def _form_page(
        self,
        request: HttpRequest,
        rule: TriggerRule,
        form: Any,
        *,
        title: str,
        submit_label: str,
        intro: str = "",
        plan_lines: list[str] | None = None,
        hidden: Any = (),
        submit_name: str = "_submit",
    ) -> TemplateResponse:
        """A desk button's page: its form (or a read-only plan) above Submit and Cancel."""
        context = {
            **self.admin_site.each_context(request),
            "title": title,
            "opts": self.opts,
            "object": rule,
            "form": form,
            "submit_label": submit_label,
            "intro": intro,
            "plan_lines": plan_lines or [],
            "hidden": list(hidden),
            "cancel_url": change_url(rule),
            "submit_name": submit_name,
        }
        return TemplateResponse(request, FORM_TEMPLATE, context)
