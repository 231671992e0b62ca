"""Django settings of the control plane.

Configuration comes from the environment. Secrets go through ``secret()``;
in production (TIDEWAY_ENV=production) a missing secret stops the process at
start rather than running with a default.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

REPO_ROOT = Path(__file__).resolve().parents[2]
TIDEWAY_HOME = Path(os.environ.get("TIDEWAY_HOME", REPO_ROOT / "var")).resolve()
PRODUCTION = os.environ.get("TIDEWAY_ENV", "development") == "production"


def secret(name: str, development_default: str) -> str:
    """The secret ``name`` from the environment; required in production."""
    value = os.environ.get(name)
    if value:
        return value
    if PRODUCTION:
        raise ImproperlyConfigured(f"{name} must be set when TIDEWAY_ENV=production")
    return development_default


SECRET_KEY = secret("TIDEWAY_SECRET_KEY", "development-only-not-secret")
DEBUG = not PRODUCTION
ALLOWED_HOSTS = os.environ.get("TIDEWAY_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",")

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "controlplane",
    "clusters",
]

MIDDLEWARE: list[str] = []
ROOT_URLCONF = "controlplane.urls"


def _database() -> dict:
    url = os.environ.get("DATABASE_URL")
    if not url:
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": str(TIDEWAY_HOME / "tideway.sqlite3")}
    from urllib.parse import unquote, urlparse

    parsed = urlparse(url)
    if parsed.scheme in ("postgres", "postgresql"):
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": parsed.path.lstrip("/"),
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "",
            "PORT": str(parsed.port or ""),
        }
    if parsed.scheme == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": unquote(parsed.path)}
    raise ImproperlyConfigured(f"DATABASE_URL scheme {parsed.scheme!r} is not supported (use postgres or sqlite)")


DATABASES = {"default": _database()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"
