from django.urls import path, re_path
from tideway_server.registry.api import views

SUBJECT = r"(?P<subject>[^/]{1,255})"
VERSION = r"(?P<version>[^/]{1,32})"

urlpatterns = [
    path("schemas/types", views.SchemaTypesView.as_view()),
    path("schemas/ids/<int:schema_id>", views.SchemaByIdView.as_view()),
    path("schemas/ids/<int:schema_id>/schema", views.SchemaByIdRawView.as_view()),
    path("schemas/ids/<int:schema_id>/subjects", views.SchemaByIdSubjectsView.as_view()),
    path("schemas/ids/<int:schema_id>/versions", views.SchemaByIdVersionsView.as_view()),
    path("subjects", views.SubjectsView.as_view()),
    re_path(rf"^subjects/{SUBJECT}$", views.SubjectView.as_view()),
    re_path(rf"^subjects/{SUBJECT}/versions$", views.VersionsView.as_view()),
    re_path(rf"^subjects/{SUBJECT}/versions/{VERSION}$", views.VersionView.as_view()),
    re_path(rf"^subjects/{SUBJECT}/versions/{VERSION}/schema$", views.VersionSchemaView.as_view()),
    path("config", views.GlobalConfigView.as_view()),
    re_path(rf"^config/{SUBJECT}$", views.SubjectConfigView.as_view()),
    re_path(rf"^compatibility/subjects/{SUBJECT}/versions$", views.CompatibilityView.as_view()),
    re_path(rf"^compatibility/subjects/{SUBJECT}/versions/{VERSION}$", views.CompatibilityView.as_view()),
]
