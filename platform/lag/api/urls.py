from django.urls import re_path
from tideway_server.lag.api import views

urlpatterns = [
    re_path(r"^queues/(?P<name>[A-Za-z0-9._-]{1,100})/groups/(?P<group>[A-Za-z0-9._-]{1,100})/lag$", views.GroupLagView.as_view()),
]
