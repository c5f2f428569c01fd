from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class TasksConfig(AppConfig):
    name = "tasks"
    verbose_name = _("Trigger rules")

    def ready(self) -> None:
        # Registers the built-in diagnostic skills, the actions and the llm_json skill.
        from tasks.skills import actions, builtin, llm_json  # noqa: F401
