from django.urls import path, re_path
from tideway_server.clusters.api import views

urlpatterns = [
    path("operator/clusters/", views.ClusterListView.as_view()),
    re_path(r"^operator/clusters/(?P<name>[a-z0-9-]{1,63})$", views.ClusterDetailView.as_view()),
    re_path(r"^operator/clusters/(?P<name>[a-z0-9-]{1,63})/manifests$", views.ClusterManifestsView.as_view()),
]
