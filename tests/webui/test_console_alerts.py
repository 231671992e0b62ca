"""The console's alert pages (issue 18): the create form's errors, a rule's page, channels with the secret shown once,
a viewer refused, another tenant's rule not found."""

from __future__ import annotations

import pytest

from tests.harness.console import PASSWORD, make_queue, signed_in

pytestmark = pytest.mark.django_db


def _form(**changes) -> dict:
    form = {"name": "behind", "metric": "lag_seconds", "queue": "orders", "group": "billing", "comparator": ">",
            "threshold": "60", "recovery_threshold": "10", "pending_m": "3", "pending_n": "5",
            "missing_data": "insufficient_data", "repeat_interval_s": "0"}
    return {**form, **changes}


def test_a_rule_is_created_with_the_form_and_its_mistakes_are_shown_on_it(client, owner_a, cluster):
    from tideway_server.alerts.models import AlertRule

    user, tenant = owner_a
    make_queue(tenant, cluster, "orders")
    signed_in(client, user)
    page = client.get("/console/alerts")
    assert page.status_code == 200 and b"No alert rule yet" in page.content
    wrong = client.post("/console/alerts", _form(threshold="many"))
    assert wrong.status_code == 400 and b"threshold is a number" in wrong.content
    upside = client.post("/console/alerts", _form(recovery_threshold="90"))
    assert upside.status_code == 400 and b"safe side" in upside.content
    unknown = client.post("/console/alerts", _form(queue="nope"))
    assert unknown.status_code == 400 and b"queue &#x27;nope&#x27; does not exist" in unknown.content
    assert AlertRule.objects.count() == 0  # nothing half-made
    made = client.post("/console/alerts", _form())
    rule = AlertRule.objects.get(tenant=tenant)
    assert made.status_code == 302 and made.headers["Location"] == f"/console/alerts/{rule.pk}"
    assert (rule.metric, rule.threshold, rule.recovery_threshold, rule.pending_m, rule.pending_n) == ("lag_seconds", 60, 10, 3, 5)
    shown = client.get(f"/console/alerts/{rule.pk}")
    assert b"lag_seconds &gt; 60.0" in shown.content and b"Nothing has happened yet" in shown.content
    client.post(f"/console/alerts/{rule.pk}", {"action": "silence", "minutes": "30"})
    rule.refresh_from_db()
    assert rule.silenced_until is not None


def test_a_webhook_secret_is_shown_once_and_an_e_mail_channel_has_none(client, owner_a, settings, monkeypatch):
    monkeypatch.setenv("TIDEWAY_WEBHOOK_ALLOW_PRIVATE", "true")
    user, _tenant = owner_a
    signed_in(client, user)
    client.post("/console/alerts/channels", {"name": "ops", "kind": "webhook", "target": "http://127.0.0.1:9/hook"})
    first = client.get("/console/alerts").content.decode()
    assert "whsec_" in first and "not shown again" in first
    assert "whsec_" not in client.get("/console/alerts").content.decode()
    client.post("/console/alerts/channels", {"name": "mail", "kind": "email", "target": "ops@example.com"})
    assert "whsec_" not in client.get("/console/alerts").content.decode()


def test_a_private_webhook_address_is_refused_unless_allowed(client, owner_a, monkeypatch):
    monkeypatch.delenv("TIDEWAY_WEBHOOK_ALLOW_PRIVATE", raising=False)
    user, tenant = owner_a
    signed_in(client, user)
    client.post("/console/alerts/channels", {"name": "inside", "kind": "webhook", "target": "http://10.0.0.5/hook"})
    page = client.get("/console/alerts").content.decode()
    assert "private or reserved address" in page and not tenant.notification_channels.exists()


def test_a_viewer_may_look_but_not_change_and_another_tenant_sees_nothing(client, owner_a, owner_b, cluster):
    from tideway_server.alerts.actions import do_create_rule
    from tideway_server.tenants.actions import do_add_member

    user_a, tenant_a = owner_a
    make_queue(tenant_a, cluster, "orders")
    rule = do_create_rule(tenant_a, {"name": "behind", "metric": "lag", "queue": "orders", "threshold": 5}, acting="test")
    viewer = do_add_member(tenant_a, username="vera", role="viewer", password=PASSWORD, acting="test").user
    signed_in(client, viewer)
    assert client.get(f"/console/alerts/{rule.pk}").status_code == 200
    assert client.post(f"/console/alerts/{rule.pk}", {"action": "delete"}).status_code == 403
    assert client.post("/console/alerts", _form(queue="orders")).status_code == 403
    signed_in(client, owner_b[0])
    assert client.get(f"/console/alerts/{rule.pk}").status_code == 404
    assert b"behind" not in client.get("/console/alerts").content
