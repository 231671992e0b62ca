"""Start Django for commands that need the control plane (controller, up, ...)."""

from __future__ import annotations

import os
from pathlib import Path


def setup_django(*, migrate: bool = False) -> None:
    """Import the control plane's settings and apps; optionally migrate the database."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tideway_server.controlplane.settings")
    import django

    django.setup()
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"].endswith("sqlite3"):
        Path(database["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    if migrate:
        from django.core.management import call_command

        call_command("migrate", interactive=False, verbosity=0)
