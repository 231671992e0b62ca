"""Tideway's Django project: settings, URLs and the ASGI entry point."""

from controlplane.celery import app as celery_app

__all__ = ["celery_app"]
