import os

from celery import Celery
from celery.signals import task_postrun, task_prerun

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_site.settings")

app = Celery("harness")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Celery task modules are called jobs.py, so "task" means one thing in an app called `tasks`.
app.autodiscover_tasks(related_name="jobs")


@task_prerun.connect
@task_postrun.connect
def _close_old_connections(**_kwargs) -> None:
    # With connections reused across tasks, still honour CONN_MAX_AGE and drop broken ones.
    from django.db import close_old_connections

    close_old_connections()
