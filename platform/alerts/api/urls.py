from django.urls import path
from tideway_server.alerts.api import views

urlpatterns = [
    path("alerts/", views.RuleListView.as_view()),
    path("alerts/<int:rule_id>", views.RuleDetailView.as_view()),
    path("alerts/<int:rule_id>/history", views.RuleHistoryView.as_view()),
    path("notification-channels/", views.ChannelListView.as_view()),
    path("notification-channels/<int:channel_id>", views.ChannelDetailView.as_view()),
    path("notification-channels/<int:channel_id>/rotate", views.ChannelRotateView.as_view()),
    path("notification-channels/<int:channel_id>/test", views.ChannelTestView.as_view()),
    path("notification-channels/<int:channel_id>/deliveries", views.ChannelDeliveriesView.as_view()),
]
