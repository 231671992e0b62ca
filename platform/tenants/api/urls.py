from django.urls import path, re_path
from tideway_server.tenants.api import views

urlpatterns = [
    path("signup", views.SignupView.as_view()),
    path("signup/finish", views.SignupFinishView.as_view()),
    path("tenant", views.CurrentTenantView.as_view()),
    path("keys/", views.ApiKeyListView.as_view()),
    re_path(r"^keys/(?P<prefix>[0-9a-f]{12})$", views.ApiKeyDetailView.as_view()),
    re_path(r"^keys/(?P<prefix>[0-9a-f]{12})/rotate$", views.ApiKeyRotateView.as_view()),
    re_path(r"^keys/(?P<prefix>[0-9a-f]{12})/aws-credentials$", views.AwsCredentialsView.as_view()),
    path("members/", views.MemberListView.as_view()),
    path("invitations/", views.InvitationListView.as_view()),
    path("invitations/accept", views.InvitationAcceptView.as_view()),
    re_path(r"^invitations/(?P<invitation_id>[0-9]{1,12})$", views.InvitationDetailView.as_view()),
    re_path(r"^members/(?P<username>[\w.@+-]{1,150})$", views.MemberDetailView.as_view()),
    path("audit/", views.AuditLogView.as_view()),
    path("operator/plans/", views.OperatorPlanListView.as_view()),
    path("operator/tenants/", views.OperatorTenantListView.as_view()),
    re_path(r"^operator/tenants/(?P<slug>[-a-zA-Z0-9_]{1,50})$", views.OperatorTenantDetailView.as_view()),
]
