"""URL routes of the control plane: the console, the REST API (v1), the schema registry, the OpenAPI schema and docs."""

from django.urls import include, path
from django.views.generic.base import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

urlpatterns = [
    path("", RedirectView.as_view(url="/console/", permanent=False)),
    path("console/", include("webui.urls")),
    path("api/v1/", include("gateway.urls")),
    path("api/v1/", include("tenants.api.urls")),
    path("api/v1/", include("topics.api.urls")),
    path("api/v1/", include("clusters.api.urls")),
    path("api/v1/", include("billing.api.urls")),
    path("api/v1/", include("lag.api.urls")),
    path("api/v1/", include("alerts.api.urls")),
    path("api/v1/registry/", include("registry.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(authentication_classes=[], permission_classes=[]), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema", authentication_classes=[], permission_classes=[]), name="docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema", authentication_classes=[], permission_classes=[])),
]

handler404 = "controlplane.api.errors.json_404"
handler500 = "controlplane.api.errors.json_500"
