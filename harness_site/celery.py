import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_site.settings")

app = Celery("harness")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Celery task modules are called jobs.py, so "task" means one thing in an app called `tasks`.
app.autodiscover_tasks(related_name="jobs")
