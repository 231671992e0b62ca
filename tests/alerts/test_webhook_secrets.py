"""Webhook signing secrets (alerts.secrets, alerts.webhooks, alerts.actions): Standard Webhooks signatures, the
secret sealed at rest, two valid secrets during a rotation, private addresses refused."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

pytestmark = pytest.mark.django_db


def _verify(secret: str, message_id: str, stamp: int, body: bytes, header: str) -> bool:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    expected = base64.b64encode(hmac.new(key, f"{message_id}.{stamp}.".encode() + body, hashlib.sha256).digest()).decode()
    return expected in [part.split(",", 1)[1] for part in header.split()]


def test_a_rotation_signs_with_both_secrets_until_it_is_finished(monkeypatch):
    from tideway_server.alerts.actions import do_create_channel, do_rotate_secret
    from tideway_server.alerts.secrets import unseal
    from tideway_server.alerts.webhooks import sign

    from tests.harness.console import signup

    monkeypatch.setenv("TIDEWAY_WEBHOOK_ALLOW_PRIVATE", "true")
    _user, tenant = signup("rosa")
    channel, first = do_create_channel(tenant, {"name": "ops", "kind": "webhook", "url": "http://127.0.0.1:9/hook"}, acting="t")
    assert first.startswith("whsec_") and first not in str(channel.secrets)  # sealed at rest
    second = do_rotate_secret(channel, acting="t")
    secrets = [unseal(token) for token in channel.secrets]
    assert secrets == [second, first]
    header = sign(secrets, "msg_1", 1_800_000_000, b'{"a":1}')
    assert header.count("v1,") == 2
    assert _verify(first, "msg_1", 1_800_000_000, b'{"a":1}', header)  # receivers not yet switched still verify
    assert _verify(second, "msg_1", 1_800_000_000, b'{"a":1}', header)
    assert not _verify(second, "msg_1", 1_800_000_001, b'{"a":1}', header)  # the timestamp is signed
    do_rotate_secret(channel, acting="t", finish=True)
    header = sign([unseal(t) for t in channel.secrets], "msg_2", 1_800_000_000, b"{}")
    assert _verify(second, "msg_2", 1_800_000_000, b"{}", header) and not _verify(first, "msg_2", 1_800_000_000, b"{}", header)


@pytest.mark.parametrize("url", ["http://127.0.0.1/x", "http://10.1.2.3/x", "http://169.254.169.254/latest", "http://[::1]/x",
                                 "ftp://example.com/x"])
def test_private_and_odd_destinations_are_refused(url, monkeypatch):
    from tideway_server.alerts.webhooks import Refused, post, resolve_public

    monkeypatch.delenv("TIDEWAY_WEBHOOK_ALLOW_PRIVATE", raising=False)
    with pytest.raises(Refused):
        resolve_public(url)
    outcome = post(url, ["whsec_" + base64.b64encode(b"k" * 24).decode()], "msg_1", {"type": "alert.test"})
    assert not outcome.ok and outcome.give_up  # never sent, never retried
