"""Tideway's Django project: settings, URLs and the ASGI entry point."""

from tideway_server.controlplane.celery import app as celery_app

__all__ = ["celery_app"]
