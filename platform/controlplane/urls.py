"""URL routes of the control plane: the console, the REST API (v1), the schema registry, the OpenAPI schema and docs."""

from django.urls import include, path
from django.views.generic.base import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

urlpatterns = [
    path("", RedirectView.as_view(url="/console/", permanent=False)),
    path("console/", include("tideway_server.webui.urls")),
    path("api/v1/", include("tideway_server.gateway.urls")),
    path("api/v1/", include("tideway_server.tenants.api.urls")),
    path("api/v1/", include("tideway_server.topics.api.urls")),
    path("api/v1/", include("tideway_server.clusters.api.urls")),
    path("api/v1/", include("tideway_server.billing.api.urls")),
    path("api/v1/", include("tideway_server.lag.api.urls")),
    path("api/v1/", include("tideway_server.alerts.api.urls")),
    path("api/v1/registry/", include("tideway_server.registry.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(authentication_classes=[], permission_classes=[]), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema", authentication_classes=[], permission_classes=[],
                                                     template_name="webui/api/swagger_ui.html"), name="docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema", authentication_classes=[], permission_classes=[])),
]

handler404 = "tideway_server.webui.views.errors.not_found"  # the console's pages, else the API's JSON
handler500 = "tideway_server.webui.views.errors.server_error"
