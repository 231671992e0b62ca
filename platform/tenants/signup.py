"""Signing up in two steps, for the console and the REST API alike: an e-mail address gets a signed link (the
answer is the same whatever the address, so sign-up never tells who has an account), and the link's holder
chooses a user name, a password and an organisation.

Links are bounded (so the site cannot be made to flood an inbox): at most MAILS_PER_RECIPIENT an hour to one
address and MAILS_PER_CLIENT an hour asked for by one client address, counted in Django's cache.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core import signing
from django.core.cache import cache

__all__ = ["SIGNUP_LINK_DAYS", "bump", "email_for", "send_link"]

log = logging.getLogger(__name__)

SIGNUP_SALT = "tideway.webui.signup"  # (its first user was the console: links already sent keep working)
SIGNUP_LINK_DAYS = 1
MAILS_PER_RECIPIENT = 3
MAILS_PER_CLIENT = 20
MAIL_WINDOW_S = 3600


def bump(key: str, window_s: int) -> int:
    """Add one to a count that lives ``window_s`` from its first; the count now."""
    if cache.add(key, 1, window_s):
        return 1
    try:
        return cache.incr(key)
    except ValueError:  # it expired between the two calls
        cache.set(key, 1, window_s)
        return 1


def may_mail(client_address: str, recipient: str) -> bool:
    """Count a mail to ``recipient`` asked for by ``client_address``; False once either is past its hourly bound."""
    to = bump(f"console-mail-to:{recipient.strip().lower()}", MAIL_WINDOW_S)
    by = bump(f"console-mail-by:{client_address}", MAIL_WINDOW_S)
    return to <= MAILS_PER_RECIPIENT and by <= MAILS_PER_CLIENT


def token_for(email: str) -> str:
    return signing.dumps({"email": email.strip().lower()}, salt=SIGNUP_SALT)


def email_for(token: str) -> str | None:
    """The address a sign-up token was sent to; None when it is not valid or older than SIGNUP_LINK_DAYS."""
    try:
        return signing.loads(token, salt=SIGNUP_SALT, max_age=SIGNUP_LINK_DAYS * 86400)["email"]
    except (signing.BadSignature, KeyError, TypeError):
        return None


def send_link(client_address: str, email: str, link: str) -> None:
    """E-mail ``link`` to ``email`` unless a bound is reached; never says which (the caller answers the same)."""
    from django.core.mail import send_mail

    try:
        if not may_mail(client_address, email):
            raise RuntimeError("the hourly bound of sign-up links for this address or client is reached")
        send_mail("Finish creating your Tideway account",
                  f"Open this link within a day to choose your user name and password:\n{link}\n\n"
                  "If you did not ask for it, ignore this message.", settings.DEFAULT_FROM_EMAIL, [email])
    except Exception as exc:  # noqa: BLE001 - no mail here: the answer says so where it may show the link
        log.info("sign-up link to %s not e-mailed: %s", email, exc)
