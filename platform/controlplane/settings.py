"""Django settings of the control plane.

Configuration comes from the environment. Secrets go through ``secret()``;
in production (TIDEWAY_ENV=production) a missing secret stops the process at
start rather than running with a default. No secret has a built-in value:
outside production, the token-signing key is generated once per deployment
in ``$TIDEWAY_HOME/signing-key`` (mode 0600) and shared by its processes.
DEBUG is off unless TIDEWAY_DEBUG=true, and a weak signing key (shorter than
32 characters, or a known development value) stops the process when it is.
"""

from __future__ import annotations

import os
from pathlib import Path

from celery.schedules import crontab
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


DEBUG = os.environ.get("TIDEWAY_DEBUG", "false").lower() == "true"
_KNOWN_DEVELOPMENT_KEYS = {"development-only-not-secret", "changeme", "secret"}
SIGNING_KEY_FILE = TIDEWAY_HOME / "signing-key"


def _signing_key() -> str:
    """TIDEWAY_SECRET_KEY, else (outside production) this deployment's generated key file."""
    value = os.environ.get("TIDEWAY_SECRET_KEY", "")
    if not value:
        if PRODUCTION:
            raise ImproperlyConfigured("TIDEWAY_SECRET_KEY must be set when TIDEWAY_ENV=production")
        from tideway_server.brokers.security.keys import create_secret_file

        create_secret_file(SIGNING_KEY_FILE, 32)
        value = SIGNING_KEY_FILE.read_text().strip()
    if not DEBUG and (len(value) < 32 or value in _KNOWN_DEVELOPMENT_KEYS):
        raise ImproperlyConfigured("the token-signing key (TIDEWAY_SECRET_KEY) is a development value or shorter than "
                                   "32 characters: refusing to start with DEBUG off")
    return value


SECRET_KEY = _signing_key()
ALLOWED_HOSTS = os.environ.get("TIDEWAY_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",")

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.sessions",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "tideway_server.controlplane.apps.ControlPlaneConfig",
    "tideway_server.billing",
    "tideway_server.lag",
    "tideway_server.alerts",
    "tideway_server.clusters",
    "tideway_server.tenants",
    "tideway_server.topics",
    "tideway_server.registry",
    "tideway_server.gateway",
    "tideway_server.webui",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # The API docs' assets (Swagger UI, Redoc) come from the installed packages, served by the application.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "tideway_server.controlplane.urls"
ASGI_APPLICATION = "tideway_server.controlplane.asgi.application"
STATIC_URL = "static/"
WHITENOISE_USE_FINDERS = True  # straight from the apps' static folders: no collectstatic step

# The console (webui): Django sessions. Cookies are HttpOnly and SameSite=Lax; Secure (HTTPS only) in
# production or with TIDEWAY_SECURE_COOKIES=true (a local `tideway up` serves plain HTTP).
LOGIN_URL = "/console/signin"
LOGIN_REDIRECT_URL = "/console/"
_SECURE_COOKIES = PRODUCTION or os.environ.get("TIDEWAY_SECURE_COOKIES", "false").lower() == "true"
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = _SECURE_COOKIES
SESSION_COOKIE_HTTPONLY = CSRF_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = CSRF_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_AGE = 12 * 3600
APPEND_SLASH = False  # API clients (Confluent's among them) call paths exactly as written

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
            ]
        },
    }
]

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tideway_server.controlplane.api.auth.ApiKeyAuthentication",
        "tideway_server.controlplane.api.auth.MemberBasicAuthentication",
        "tideway_server.controlplane.api.auth.MemberSessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["tideway_server.controlplane.api.permissions.TenantScopePermission"],
    "EXCEPTION_HANDLER": "tideway_server.controlplane.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "DEFAULT_PARSER_CLASSES": ["tideway_server.controlplane.api.parsers.JSONParser"],
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Tideway API",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # The data gateway's operations (plain async views, invisible to DRF) join the same document.
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "tideway_server.gateway.openapi.add_data_api"],
    "DESCRIPTION": "Publish and consume (queues, streams, dead letters); tenants, API keys, queues and topics, "
                   "the schema registry and the audit log of Tideway.",
}


# Several processes share one SQLite file (controller, API server, CLI): wait for the write
# lock rather than fail, and take it at the start of a transaction (no lock upgrades to deadlock).
_SQLITE_OPTIONS = {"timeout": 20, "transaction_mode": "IMMEDIATE"}


def _database() -> dict:
    url = os.environ.get("DATABASE_URL")
    if not url:
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": str(TIDEWAY_HOME / "tideway.sqlite3"), "OPTIONS": _SQLITE_OPTIONS}
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
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": unquote(parsed.path), "OPTIONS": _SQLITE_OPTIONS}
    raise ImproperlyConfigured(f"DATABASE_URL scheme {parsed.scheme!r} is not supported (use postgres or sqlite)")


DATABASES = {"default": _database()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"

# Redis: Celery's broker and results, the gateway's rate-limit buckets and dedup windows.
# `tideway up` starts one on this port when none answers; never the system's 6379 by default.
TIDEWAY_REDIS_URL = os.environ.get("TIDEWAY_REDIS_URL", "redis://127.0.0.1:9479/0")
CELERY_BROKER_URL = TIDEWAY_REDIS_URL
CELERY_RESULT_BACKEND = TIDEWAY_REDIS_URL
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_TRACK_STARTED = True
CELERY_RESULT_EXPIRES = 24 * 3600
# Billing runs Spark jobs: on a queue of its own (see billing.tasks), scheduled by Celery beat.
# Lag looks and alert rules on "monitoring", served by a worker of their own: they never wait behind either.
CELERY_TASK_ROUTES = {"billing.*": {"queue": "billing"}, "lag.rollup": {"queue": "billing"},
                      "lag.*": {"queue": "monitoring"}, "alerts.*": {"queue": "monitoring"}}
USAGE_REFRESH_SECONDS = int(os.environ.get("TIDEWAY_USAGE_REFRESH_S", "240"))  # usage shows within 5 min
LAG_SAMPLE_SECONDS = float(os.environ.get("TIDEWAY_LAG_SAMPLE_S", "5"))
LAG_ROLLUP_SECONDS = float(os.environ.get("TIDEWAY_LAG_ROLLUP_S", "300"))
ALERTS_EVALUATE_SECONDS = float(os.environ.get("TIDEWAY_ALERTS_EVALUATE_S", "10"))
CELERY_BEAT_SCHEDULE = {
    # A refresh still waiting when the next is due is dropped (expires): refreshes never pile up behind a slow one.
    "usage-current-period": {"task": "billing.refresh_current_period", "schedule": float(USAGE_REFRESH_SECONDS),
                             "options": {"expires": float(USAGE_REFRESH_SECONDS)}},
    "lag-sample": {"task": "lag.sample", "schedule": LAG_SAMPLE_SECONDS, "options": {"expires": LAG_SAMPLE_SECONDS}},
    "alerts-evaluate": {"task": "alerts.evaluate", "schedule": ALERTS_EVALUATE_SECONDS,
                        "options": {"expires": ALERTS_EVALUATE_SECONDS}},
    "alerts-deliver": {"task": "alerts.deliver", "schedule": 5.0, "options": {"expires": 5.0}},
    "lag-rollup": {"task": "lag.rollup", "schedule": LAG_ROLLUP_SECONDS, "options": {"expires": LAG_ROLLUP_SECONDS}},
    # Last month is finalised on the 1st at 00:30 UTC (runs on the 2nd and 3rd only roll up what arrived late).
    "close-last-month": {"task": "billing.close_last_month", "schedule": crontab(minute=30, hour=0, day_of_month="1-3")},
}

# The service key the control plane, gateway and Celery use on brokers (brokers/security/keys.py):
# TIDEWAY_SERVICE_KEY, else derived from the deployment's cluster secret ($TIDEWAY_CLUSTER_SECRET or
# $TIDEWAY_HOME/cluster-secret) when the process can read it (clusters.admin.broker_credentials).
TIDEWAY_SERVICE_KEY = os.environ.get("TIDEWAY_SERVICE_KEY", "")
if PRODUCTION and not TIDEWAY_SERVICE_KEY and not os.environ.get("TIDEWAY_CLUSTER_SECRET"):
    raise ImproperlyConfigured("TIDEWAY_SERVICE_KEY (or TIDEWAY_CLUSTER_SECRET) must be set when TIDEWAY_ENV=production")

# The gateway reads a publish body of at most this many bytes (1,000 messages and their JSON).
# The SQS endpoint (/sqs/, docs/sqs.md): the region clients sign for and that ARNs name.
TIDEWAY_SQS_REGION = os.environ.get("TIDEWAY_SQS_REGION", "us-east-1")
GATEWAY_MAX_BODY_BYTES = int(os.environ.get("TIDEWAY_GATEWAY_MAX_BODY_BYTES", 16 << 20))
DATA_UPLOAD_MAX_MEMORY_SIZE = GATEWAY_MAX_BODY_BYTES

# Alert e-mail goes through Django's SMTP backend (an attempt that fails is recorded and retried).
EMAIL_HOST = os.environ.get("TIDEWAY_EMAIL_HOST", "localhost")
EMAIL_PORT = int(os.environ.get("TIDEWAY_EMAIL_PORT", "25"))
EMAIL_HOST_USER = os.environ.get("TIDEWAY_EMAIL_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("TIDEWAY_EMAIL_PASSWORD", "")
EMAIL_USE_TLS = os.environ.get("TIDEWAY_EMAIL_TLS", "").lower() in ("1", "true", "yes")
EMAIL_TIMEOUT = 10
DEFAULT_FROM_EMAIL = os.environ.get("TIDEWAY_EMAIL_FROM", "Tideway <alerts@localhost>")
# Sign-up sends a link to the address given; a development site (which usually sends no mail) shows it on the
# page too. Never in production: the page would then let anyone sign up with anyone's address.
SIGNUP_LINK_ON_PAGE = os.environ.get("TIDEWAY_SIGNUP_LINK_ON_PAGE", "false" if PRODUCTION else "true").lower() == "true"
