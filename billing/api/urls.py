from django.urls import path
from tideway_server.billing.api import views

urlpatterns = [
    path("usage", views.UsageView.as_view()),
    path("invoices/", views.InvoiceListView.as_view()),
    path("invoices/<int:invoice_id>", views.InvoiceDetailView.as_view()),
    path("invoices/<int:invoice_id>.csv", views.InvoiceCsvView.as_view()),
    path("operator/invoices/", views.OperatorInvoiceListView.as_view()),
]
