"""Start Django for commands that need the control plane (controller, up, ...)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

PLATFORM_DIR = Path(__file__).resolve().parents[1] / "platform"


def setup_django(*, migrate: bool = False) -> None:
    """Import the control plane's settings and apps; optionally migrate the database."""
    if PLATFORM_DIR.is_dir() and str(PLATFORM_DIR) not in sys.path:
        sys.path.insert(0, str(PLATFORM_DIR))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    import django

    django.setup()
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"].endswith("sqlite3"):
        Path(database["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    if migrate:
        from django.core.management import call_command

        call_command("migrate", interactive=False, verbosity=0)
