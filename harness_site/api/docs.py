"""The API's OpenAPI schema and its two docs pages (Swagger UI, Redoc), from this site only.

Every asset is one of our static files (drf-spectacular-sidecar): public CDNs and font hosts are
slow or blocked for many users. The pages also carry a Content-Security-Policy that lets the browser
fetch from this site alone, since the bundles themselves would reach out: Redoc for its logo
(cdn.redoc.ly), Swagger UI for its online validator badge (also turned off here).
"""

from typing import TYPE_CHECKING

from drf_spectacular.settings import spectacular_settings
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

# Both UIs run inline scripts and styles from their templates; Redoc's search runs in a blob: worker.
LOCAL_ONLY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self' 'unsafe-inline'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self' data:",
        "worker-src 'self' blob:",
        "object-src 'none'",
        "frame-ancestors 'self'",
    )
)


class PublicSchemaView(SpectacularAPIView):
    # The schema and docs describe the API; reading them needs no account (the data does).
    authentication_classes = []
    permission_classes = []


if TYPE_CHECKING:
    from rest_framework.views import APIView as _View  # the views this is mixed into
else:
    _View = object


class LocalAssetsOnly(_View):
    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        response["Content-Security-Policy"] = LOCAL_ONLY
        return response


class PublicSwaggerView(LocalAssetsOnly, SpectacularSwaggerView):
    authentication_classes = []
    permission_classes = []

    @extend_schema(exclude=True)  # a page, not an operation (the base class says so on its own get)
    def get(self, request, *args, **kwargs):
        response = super().get(request, *args, **kwargs)
        # Swagger UI would show a badge fetched from validator.swagger.io (with our schema's URL).
        ui_settings = {**spectacular_settings.SWAGGER_UI_SETTINGS, "validatorUrl": None}
        response.data["settings"] = self._dump(ui_settings)
        return response


class PublicRedocView(LocalAssetsOnly, SpectacularRedocView):
    authentication_classes = []
    permission_classes = []
    template_name = "api/redoc.html"
