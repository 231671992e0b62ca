"""The Celery app of the control plane: ``celery -A tideway_server.controlplane worker``.

Redis (TIDEWAY_REDIS_URL) is its broker and result store. Tasks live in each
app's ``tasks`` module (e.g. tideway_server.gateway.tasks: dead-letter redrives).
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tideway_server.controlplane.settings")

app = Celery("tideway_server.controlplane")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
