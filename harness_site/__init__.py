import zoneinfo

# The zone database is the pinned tzdata package, never the host's files (invariant 4): zoneinfo reads
# the OS's /usr/share/zoneinfo (or PYTHONTZPATH) before tzdata, and the OS copy may be older than the
# pin. Done here, first, because every process (web, worker, beat, manage.py) imports this package.
zoneinfo.reset_tzpath(to=[])

from harness_site.celery import app as celery_app  # noqa: E402

__all__ = ("celery_app",)
