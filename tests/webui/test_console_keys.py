"""API keys in the console and the API (issue 43): an expiry, rotation with a grace period, mistakes beside
their fields; an expired key is refused by the API, the gateway and the brokers' credential answers."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.harness.console import signed_in

pytestmark = pytest.mark.django_db


def test_a_key_is_created_with_an_expiry_and_mistakes_keep_the_form(client, owner_a):
    from tideway_server.tenants.models import ApiKey

    user, tenant = owner_a
    signed_in(client, user)
    wrong = client.post("/console/keys", {"name": "ci deploys", "queue_patterns": "orders*", "expires": "30"})
    page = wrong.content.decode()
    assert wrong.status_code == 400 and "Tick at least one scope" in page and not ApiKey.objects.exists()
    assert 'value="ci deploys"' in page and 'value="orders*"' in page and '<option value="30" selected>' in page
    made = client.post("/console/keys", {"name": "ci deploys", "scopes": ["produce"], "expires": "30"})
    row = ApiKey.objects.get(tenant=tenant)
    assert made.status_code == 200 and "not shown again" in made.content.decode()
    assert abs((row.expires_at - timezone.now()) - timedelta(days=30)) < timedelta(minutes=1)
    listed = client.get("/console/keys").content.decode()
    assert f'<time datetime="{row.expires_at:%Y-%m-%dT%H:%M}' in listed  # shown in the viewer's time zone by times.js
    assert 'data-key-state="active"' in listed and f'href="/console/keys/{row.prefix}/rotate"' in listed


def test_rotation_gives_a_new_key_and_the_old_one_stops_after_the_grace(client, owner_a):
    from tideway_server.clusters.controller.actions import describe_credential
    from tideway_server.controlplane.api.auth import principal_for_key
    from tideway_server.tenants.actions import do_create_api_key
    from tideway_server.tenants.models import ApiKey, AuditEntry

    user, tenant = owner_a
    old, old_key = do_create_api_key(tenant, name="workers", scopes=["consume", "produce"], queue_patterns=["jobs"],
                                     acting="test")
    signed_in(client, user)
    ask = client.get(f"/console/keys/{old.prefix}/rotate")
    assert ask.status_code == 200 and "keeps working for" in ask.content.decode()
    done = client.post(f"/console/keys/{old.prefix}/rotate", {"grace_s": "3600"})
    assert done.status_code == 302
    shown = client.get("/console/keys").content.decode()
    new = ApiKey.objects.exclude(pk=old.pk).get(tenant=tenant)
    assert f"in place of <code>{old.prefix}…</code>" in shown and "not shown again" in shown
    assert "not shown again" not in client.get("/console/keys").content.decode()  # once
    assert (new.name, new.scopes, new.queue_patterns, new.expires_at) == ("workers", ["consume", "produce"], ["jobs"], None)
    old.refresh_from_db()
    assert abs((old.expires_at - timezone.now()) - timedelta(hours=1)) < timedelta(minutes=1)
    assert principal_for_key(old_key).tenant == tenant  # still works within the grace
    assert AuditEntry.objects.filter(tenant=tenant, action="api_key.rotate", target=old.prefix).exists()
    # the grace is over: refused by the API and in the brokers' credential answers, like a revoked key
    ApiKey.objects.filter(pk=old.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    from rest_framework.exceptions import AuthenticationFailed

    with pytest.raises(AuthenticationFailed, match="expired"):
        principal_for_key(old_key)
    assert describe_credential(old.prefix).revoked and not describe_credential(new.prefix).revoked
    assert 'data-key-state="expired"' in client.get("/console/keys").content.decode()
    again = client.post(f"/console/keys/{old.prefix}/rotate", {"grace_s": "0"})
    assert again.status_code == 400 and "expired" in again.content.decode()


def test_the_api_rotates_a_key_and_takes_an_expiry(client, owner_a):
    from tideway_server.tenants.actions import do_create_api_key

    _user, tenant = owner_a
    admin, admin_key = do_create_api_key(tenant, name="admin", scopes=["manage"], acting="test")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {admin_key}"}
    past = client.post("/api/v1/keys/", {"name": "x", "scopes": ["consume"], "expires_at": "2020-01-01T00:00:00Z"},
                       content_type="application/json", **auth)
    assert past.status_code == 400 and past.json()["code"] == "invalid_request"
    made = client.post("/api/v1/keys/", {"name": "x", "scopes": ["consume"], "expires_at": "2099-01-01T00:00:00Z"},
                       content_type="application/json", **auth)
    assert made.status_code == 201 and made.json()["expires_at"].startswith("2099-01-01")
    prefix = made.json()["prefix"]
    rotated = client.post(f"/api/v1/keys/{prefix}/rotate", {"grace_s": 0}, content_type="application/json", **auth)
    body = rotated.json()
    assert rotated.status_code == 201 and body["key"].startswith("tw_") and body["prefix"] != prefix
    old = client.get(f"/api/v1/keys/{prefix}", **auth).json()
    assert old["expires_at"] is not None  # stopped now (grace 0)
    too_long = client.post(f"/api/v1/keys/{body['prefix']}/rotate", {"grace_s": 99 * 86400}, content_type="application/json", **auth)
    assert too_long.status_code == 400


def test_aws_credentials_are_made_shown_once_replaced_and_revoked_from_the_keys_page(client, owner_a):
    from tideway_server.tenants.actions import do_create_api_key
    from tideway_server.tenants.aws_credentials import access_key_id, secret_access_key
    from tideway_server.tenants.models import ApiKey, AuditEntry

    user, tenant = owner_a
    signed_in(client, user)
    row, _key = do_create_api_key(tenant, name="sqs worker", scopes=["consume"], acting="test")
    made = client.post(f"/console/keys/{row.prefix}/aws-credentials", follow=True).content.decode()
    row.refresh_from_db()
    secret = secret_access_key(row.prefix, row.aws_credentials_salt)
    assert f'value="{access_key_id(row.prefix)}"' in made and f'value="{secret}"' in made and "not shown again" in made
    again = client.get("/console/keys").content.decode()
    assert secret not in again and access_key_id(row.prefix) in again  # the id stays listed, the secret is gone
    client.post(f"/console/keys/{row.prefix}/aws-credentials", follow=True)
    row.refresh_from_db()
    assert secret_access_key(row.prefix, row.aws_credentials_salt) != secret  # replaced
    client.post(f"/console/keys/{row.prefix}/aws-credentials", {"revoke": "1"})
    row.refresh_from_db()
    assert row.aws_credentials_salt == ""
    assert list(AuditEntry.objects.filter(tenant=tenant, target=row.prefix).values_list("action", flat=True).order_by("id")) == [
        "api_key.create", "api_key.aws_credentials", "api_key.aws_credentials", "api_key.aws_credentials_revoke"]
    assert ApiKey.objects.get(pk=row.pk).revoked_at is None  # the key itself goes on
