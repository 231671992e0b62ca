from django.urls import path

from billing.api import views

urlpatterns = [
    path("usage", views.UsageView.as_view()),
]
