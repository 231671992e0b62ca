"""The broker's cache of tenant keys through a controller outage (issue 40), with a lookup the test controls.

Rules: a key checked before the outage keeps authenticating, without waiting on the controller, up to the
outage bound; a key never seen gets the retriable AUTHENTICATION_UNAVAILABLE; once the controller answers again
a revocation made meanwhile takes effect on the next check after one lookup.
"""

from __future__ import annotations

import asyncio

import pytest
from tideway_server.brokers.security.keys import hash_secret
from tideway_server.brokers.server import credentials as credentials_module
from tideway_server.brokers.server.credentials import CredentialStore

from tideway.protocol import errors
from tideway.protocol import messages as m

PREFIX = "0123456789ab"
KEY = f"tw_{PREFIX}_secret"


class Controller:
    """A lookup that answers from ``keys`` while ``up``, and fails as an absent controller does otherwise."""

    def __init__(self) -> None:
        self.up = True
        self.revoked = False
        self.calls = 0

    async def lookup(self, prefix: str) -> m.DescribeCredentialResponse:
        self.calls += 1
        if not self.up:
            raise errors.NotControllerError("no active controller")
        if prefix != PREFIX:
            return m.DescribeCredentialResponse(found=False)
        return m.DescribeCredentialResponse(found=True, tenant_id=7, secret_sha256=hash_secret("secret"),
                                            scopes=["produce"], revoked=self.revoked)


@pytest.fixture
def clock(monkeypatch):
    """The store's monotonic clock, moved by the test."""
    now = [1000.0]
    monkeypatch.setattr(credentials_module.time, "monotonic", lambda: now[0])
    return now


async def test_known_keys_outlive_an_outage_up_to_the_bound_and_unknown_ones_are_retriable(clock):
    controller = Controller()
    store = CredentialStore(controller.lookup, ttl_s=2, outage_stale_max_s=60)
    principal = await store.authenticate(KEY)
    assert principal.tenant_id == 7
    controller.up = False
    clock[0] += 10
    await store.check(principal)  # the first failed lookup falls back to the cached answer
    assert store.controller_unreachable
    calls = controller.calls
    for _ in range(100):  # later checks do not wait on the controller: at most one lookup a second
        await store.check(principal)
        assert (await store.authenticate(KEY)).tenant_id == 7
    await asyncio.sleep(0)
    assert controller.calls - calls <= 1
    with pytest.raises(errors.AuthenticationUnavailableError) as unknown:
        await store.authenticate("tw_ffffffffffff_other")
    assert unknown.value.retriable and isinstance(unknown.value, errors.SaslAuthenticationFailedError)
    clock[0] += 51  # 61 s after the key was last checked: past the bound
    with pytest.raises(errors.AuthenticationUnavailableError):
        await store.check(principal)


async def test_a_key_revoked_during_the_outage_is_refused_once_the_controller_answers(clock):
    controller = Controller()
    store = CredentialStore(controller.lookup, ttl_s=2, outage_stale_max_s=600)
    principal = await store.authenticate(KEY)
    controller.up = False
    clock[0] += 5
    await store.check(principal)
    controller.revoked = True  # revoked in the database while the controller is away
    clock[0] += 5
    await store.check(principal)  # unknown to the broker yet
    controller.up = True
    clock[0] += 1.5  # past the retry interval: the next check asks again, in the background
    await store.check(principal)
    await asyncio.sleep(0)  # the background lookup completes
    await asyncio.sleep(0)
    assert not store.controller_unreachable
    with pytest.raises(errors.SaslAuthenticationFailedError):
        await store.check(principal)
    with pytest.raises(errors.SaslAuthenticationFailedError, match="revoked"):
        await store.authenticate(KEY)
