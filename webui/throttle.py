"""Sign-in throttling: after a few failed attempts for a user name from one address, wait (the bound on sign-up
links is tideway_server.tenants.signup's).

Counted in Django's cache (per process; one `tideway serve` process serves the
console). Five failures within 5 minutes lock that name for that address for the
rest of the 5 minutes; a success clears the count.
"""

from __future__ import annotations

from django.core.cache import cache
from tideway_server.tenants.signup import bump

FAILURES_MAX = 5
WINDOW_S = 300


def _key(request, username: str) -> str:
    return f"console-signin:{request.META.get('REMOTE_ADDR', '')}:{username.strip().lower()}"


def locked(request, username: str) -> bool:
    return cache.get(_key(request, username), 0) >= FAILURES_MAX


def failed(request, username: str) -> None:
    bump(_key(request, username), WINDOW_S)


def succeeded(request, username: str) -> None:
    cache.delete(_key(request, username))
