from django.apps import AppConfig


class TasksConfig(AppConfig):
    name = "tasks"
    verbose_name = "Trigger rules"

    def ready(self) -> None:
        # Registers the built-in diagnostic skills, the actions and the llm_json skill.
        from . import actions, builtin_skills, llm_skills  # noqa: F401
