"""Sending notifications: webhooks signed as the Standard Webhooks spec says, and e-mail.

Signature: ``webhook-signature: v1,<base64 HMAC-SHA256(secret, "<webhook-id>.<webhook-timestamp>.<body>")>``, one
per valid secret (two during a rotation), space-separated. ``webhook-id`` is the delivery's, the same on every
retry, so a receiver can drop a repeat.

Outbound requests go only to public addresses: the host is resolved here, every address checked, and the
request made to the address checked (the name kept for Host and TLS), so a name cannot resolve elsewhere a
moment later. ``TIDEWAY_WEBHOOK_ALLOW_PRIVATE`` (an operator's setting: ``true`` or a comma-separated list of
networks such as ``127.0.0.1/32``) lets private and loopback addresses through.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx
from tideway_server.alerts.secrets import secret_bytes

TIMEOUT_S = 10.0


class Refused(Exception):
    """A destination that may not be called (the message says why)."""


@dataclass
class Outcome:
    ok: bool
    status_code: int | None = None
    error: str = ""
    retry_after_s: float | None = None
    give_up: bool = False


def sign(secrets: list[str], message_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{message_id}.{timestamp}.".encode() + body
    return " ".join("v1," + base64.b64encode(hmac.new(secret_bytes(s), signed, hashlib.sha256).digest()).decode()
                    for s in secrets)


def _allowed_private() -> list | bool:
    import os

    value = os.environ.get("TIDEWAY_WEBHOOK_ALLOW_PRIVATE", "").strip()
    if value.lower() in ("1", "true", "yes"):
        return True
    return [ipaddress.ip_network(part.strip(), strict=False) for part in value.split(",") if part.strip()]


def resolve_public(url: str) -> tuple[str, str]:
    """(the URL with its host replaced by a checked address, the host name); Refused for a private destination."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Refused("a webhook URL is http:// or https:// with a host")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise Refused(f"{parts.hostname} does not resolve ({exc.strerror})") from None
    allowed = _allowed_private()
    addresses = [ipaddress.ip_address(info[4][0]) for info in infos]
    for address in addresses:
        public = address.is_global and not address.is_multicast
        if not public and allowed is not True and not any(address in network for network in allowed):
            raise Refused(f"{parts.hostname} resolves to {address}, a private or reserved address (an operator can "
                          "allow it with TIDEWAY_WEBHOOK_ALLOW_PRIVATE)")
    address = addresses[0]
    host = f"[{address}]" if address.version == 6 else str(address)
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, "")), parts.hostname


def post(url: str, secrets: list[str], message_id: str, payload: dict) -> Outcome:
    body = json.dumps(payload, separators=(",", ":")).encode()
    timestamp = int(time.time())
    try:
        pinned, host = resolve_public(url)
    except Refused as exc:
        return Outcome(False, error=str(exc), give_up=True)
    headers = {"content-type": "application/json", "webhook-id": message_id, "webhook-timestamp": str(timestamp),
               "webhook-signature": sign(secrets, message_id, timestamp, body), "host": host,
               "user-agent": "Tideway-Webhooks/1"}
    try:
        with httpx.Client(timeout=TIMEOUT_S, follow_redirects=False) as client:
            answer = client.post(pinned, content=body, headers=headers, extensions={"sni_hostname": host})
    except httpx.HTTPError as exc:
        return Outcome(False, error=f"{type(exc).__name__}: {exc}"[:500])
    if 200 <= answer.status_code < 300:
        return Outcome(True, answer.status_code)
    retry_after = answer.headers.get("retry-after")
    wait = float(retry_after) if retry_after and retry_after.isdigit() else None
    return Outcome(False, answer.status_code, error=answer.text[:200], retry_after_s=wait, give_up=answer.status_code == 410)


def send_email(to: str, payload: dict) -> Outcome:
    from django.conf import settings
    from django.core.mail import send_mail

    subject = f"[Tideway] {payload['summary']}"
    text = "\n".join(f"{name}: {value}" for name, value in payload.items() if not isinstance(value, dict | list))
    try:
        send_mail(subject, text, settings.DEFAULT_FROM_EMAIL, [to], fail_silently=False)
    except (OSError, Exception) as exc:  # noqa: BLE001 - any SMTP failure is an attempt that failed, retried later
        return Outcome(False, error=f"{type(exc).__name__}: {exc}"[:500])
    return Outcome(True)
