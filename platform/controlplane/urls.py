"""URL routes of the control plane (the REST API and console come in later issues)."""

urlpatterns: list = []
