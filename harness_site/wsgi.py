import os

from django.core.wsgi import get_wsgi_application

from harness_site import tracing

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_site.settings")
# Only with OTEL_* set: the SDK, an exporter and the Django instrumentation (before the middleware loads).
tracing.otel_configure(django=True)
application = get_wsgi_application()
