from django.urls import path, re_path
from tideway_server.topics.api import views

urlpatterns = [
    path("queues/", views.QueueListView.as_view()),
    re_path(r"^queues/(?P<name>[A-Za-z0-9._-]{1,100})$", views.QueueDetailView.as_view()),
]
