"""Sign-in throttling: after a few failed attempts for a user name from one address, wait; and a bound on the
sign-up links the console e-mails (so the site cannot be made to flood someone's inbox).

Counted in Django's cache (per process; one `tideway serve` process serves the
console). Five failures within 5 minutes lock that name for that address for the
rest of the 5 minutes; a success clears the count. At most 3 sign-up links an hour go to one e-mail address,
and at most 20 an hour are asked for from one client address.
"""

from __future__ import annotations

from django.core.cache import cache

FAILURES_MAX = 5
WINDOW_S = 300


def _key(request, username: str) -> str:
    return f"console-signin:{request.META.get('REMOTE_ADDR', '')}:{username.strip().lower()}"


def locked(request, username: str) -> bool:
    return cache.get(_key(request, username), 0) >= FAILURES_MAX


def _bump(key: str, window_s: int) -> int:
    """Add one to a count that lives ``window_s`` from its first; the count now."""
    if cache.add(key, 1, window_s):
        return 1
    try:
        return cache.incr(key)
    except ValueError:  # it expired between the two calls
        cache.set(key, 1, window_s)
        return 1


def failed(request, username: str) -> None:
    _bump(_key(request, username), WINDOW_S)


def succeeded(request, username: str) -> None:
    cache.delete(_key(request, username))


MAILS_PER_RECIPIENT = 3
MAILS_PER_CLIENT = 20
MAIL_WINDOW_S = 3600


def may_mail(request, recipient: str) -> bool:
    """Count a mail to ``recipient`` asked for by this client; False once either is past its hourly bound."""
    to = _bump(f"console-mail-to:{recipient.strip().lower()}", MAIL_WINDOW_S)
    by = _bump(f"console-mail-by:{request.META.get('REMOTE_ADDR', '')}", MAIL_WINDOW_S)
    return to <= MAILS_PER_RECIPIENT and by <= MAILS_PER_CLIENT
