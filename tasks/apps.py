from django.apps import AppConfig


class TasksConfig(AppConfig):
    name = "tasks"
    verbose_name = "Trigger rules"

    def ready(self) -> None:
        # Registers the built-in diagnostic skills with the registry.
        from . import builtin_skills  # noqa: F401
