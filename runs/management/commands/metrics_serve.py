"""`manage.py metrics_serve [--bind HOST:PORT]`: the Prometheus metrics on an address of their own.

For a deployment that keeps /metrics off the public web app: bind it to an internal interface
(HARNESS_METRICS_BIND, default 127.0.0.1:9464) that only the Prometheus server reaches. No token is
asked here; the address is the protection. The values are the same as the web app's /metrics: both
read the database (runs/desk/metrics.py), so one such process per deployment is enough.
"""

from wsgiref.simple_server import WSGIRequestHandler, make_server

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, close_old_connections
from prometheus_client import make_wsgi_app

from runs.desk.metrics import metrics_registry


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args) -> None:
        pass  # one line per scrape every 15 s is noise; errors still reach the log


def metrics_app():
    """The WSGI app: /metrics (and /) in Prometheus or OpenMetrics text, 503 when the database is down."""
    inner = make_wsgi_app(metrics_registry())

    def app(environ, start_response):
        close_old_connections()  # honour CONN_MAX_AGE and drop a connection the database closed
        try:
            return inner(environ, start_response)
        except DatabaseError as exc:
            start_response("503 Service Unavailable", [("Content-Type", "text/plain; charset=utf-8")])
            return [f"database unreachable: {type(exc).__name__}\n".encode()]

    return app


class Command(BaseCommand):
    help = "Serve the Prometheus metrics on an address of their own (HARNESS_METRICS_BIND)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--bind", default=settings.HARNESS["METRICS_BIND"], help="HOST:PORT to listen on")

    def handle(self, *args, bind: str, **options) -> None:
        host, _, port = bind.rpartition(":")
        if not host or not port.isdigit():
            raise CommandError(f"--bind {bind!r}: give HOST:PORT, e.g. 127.0.0.1:9464")
        server = make_server(host.strip("[]"), int(port), metrics_app(), handler_class=_QuietHandler)
        self.stdout.write(f"metrics on http://{bind}/metrics")
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
