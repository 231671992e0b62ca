"""ASGI entry point of the control plane and gateway: ``uvicorn controlplane.asgi:application``."""

import os
import sys
from pathlib import Path

_PLATFORM = str(Path(__file__).resolve().parents[1])
if _PLATFORM not in sys.path:
    sys.path.insert(0, _PLATFORM)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

application = get_asgi_application()
