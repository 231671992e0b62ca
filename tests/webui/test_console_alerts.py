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
    assert unknown.status_code == 400 and b"Queue &#x27;nope&#x27; does not exist" in unknown.content
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
    answer = client.post("/console/alerts/channels", {"name": "inside", "kind": "webhook", "target": "http://10.0.0.5/hook"})
    page = answer.content.decode()
    assert answer.status_code == 400 and "private or reserved address" in page and not tenant.notification_channels.exists()


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


def test_every_mistake_of_the_rule_form_sits_beside_its_field_and_what_was_typed_stays(client, owner_a, cluster):
    from tideway_server.alerts.actions import do_create_channel
    from tideway_server.alerts.models import AlertRule

    user, tenant = owner_a
    make_queue(tenant, cluster, "orders")
    do_create_channel(tenant, {"name": "mail", "kind": "email", "email": "ops@example.com"}, acting="test")
    signed_in(client, user)
    wrong = client.post("/console/alerts", {**_form(threshold="many", pending_m="9", pending_n="5", name="careful"),
                                             "channels": ["mail"]})
    page = wrong.content.decode()
    assert wrong.status_code == 400 and AlertRule.objects.count() == 0
    # both mistakes, each under its own field, in words
    assert "The threshold is a number." in page and "M (the breaching evaluations) is a whole number from 1 to 5" in page
    assert page.index("The threshold is a number") > page.index('id="a-threshold"')
    assert page.index("M (the breaching") > page.index('id="a-m"') and page.index("M (the breaching") < page.index('id="a-n"')
    # what was typed is still there, the channel still ticked
    assert 'value="careful"' in page and 'value="many"' in page and 'value="9"' in page
    assert 'value="mail" checked' in page


def test_a_rule_is_edited_with_the_same_form_and_keeps_its_history(client, owner_a, cluster):
    from tideway_server.alerts.actions import do_create_rule
    from tideway_server.tenants.models import AuditEntry

    user, tenant = owner_a
    make_queue(tenant, cluster, "orders")
    rule = do_create_rule(tenant, {"name": "behind", "metric": "lag", "queue": "orders", "threshold": 5}, acting="test")
    signed_in(client, user)
    form = client.get(f"/console/alerts/{rule.pk}/edit").content.decode()
    assert 'value="behind"' in form and 'value="5"' in form  # filled in from the rule
    bad = client.post(f"/console/alerts/{rule.pk}/edit", _form(name="behind", threshold="", recovery_threshold="x"))
    assert bad.status_code == 400 and b"The threshold is a number." in bad.content
    assert b"The recovery threshold is a number." in bad.content
    rule.refresh_from_db()
    assert rule.threshold == 5  # unchanged
    done = client.post(f"/console/alerts/{rule.pk}/edit", _form(name="far behind", threshold="500", recovery_threshold="100"))
    assert done.status_code == 302 and done.headers["Location"] == f"/console/alerts/{rule.pk}"
    rule.refresh_from_db()
    assert (rule.name, rule.metric, rule.threshold, rule.recovery_threshold, rule.group) == \
        ("far behind", "lag_seconds", 500, 100, "billing")
    assert AuditEntry.objects.filter(tenant=tenant, action="alert.update", target="far behind").exists()


def test_deleting_a_rule_or_a_channel_asks_for_its_name_first(client, owner_a, cluster):
    from tideway_server.alerts.actions import do_create_channel, do_create_rule
    from tideway_server.alerts.models import AlertRule, NotificationChannel

    user, tenant = owner_a
    make_queue(tenant, cluster, "orders")
    channel, _ = do_create_channel(tenant, {"name": "mail", "kind": "email", "email": "ops@example.com"}, acting="test")
    rule = do_create_rule(tenant, {"name": "behind", "metric": "lag", "queue": "orders", "threshold": 5,
                                   "channels": ["mail"]}, acting="test")
    signed_in(client, user)
    detail = client.get(f"/console/alerts/{rule.pk}").content.decode()
    assert f'href="/console/alerts/{rule.pk}/delete"' in detail  # a link to the confirmation, not a one-click form
    ask = client.get(f"/console/alerts/{rule.pk}/delete")
    assert ask.status_code == 200 and b"cannot be undone" in ask.content and b"silence it" in ask.content
    wrong = client.post(f"/console/alerts/{rule.pk}/delete", {"confirm": "behinD"})
    assert wrong.status_code == 400 and AlertRule.objects.filter(pk=rule.pk).exists()
    done = client.post(f"/console/alerts/{rule.pk}/delete", {"confirm": "behind"})
    assert done.status_code == 302 and not AlertRule.objects.filter(pk=rule.pk).exists()
    assert b"The rule behind was deleted." in client.get("/console/alerts").content

    ask = client.get(f"/console/alerts/channels/{channel.pk}/delete")
    assert ask.status_code == 200 and b"ops@example.com" in ask.content
    assert client.post(f"/console/alerts/channels/{channel.pk}/delete", {}).status_code == 400
    assert NotificationChannel.objects.filter(pk=channel.pk).exists()
    client.post(f"/console/alerts/channels/{channel.pk}/delete", {"confirm": "mail"})
    assert not NotificationChannel.objects.filter(pk=channel.pk).exists()


def test_a_channel_form_mistake_keeps_the_form_and_a_test_says_how_it_went(client, owner_a, monkeypatch):
    from tideway_server.alerts.models import NotificationChannel

    monkeypatch.setenv("TIDEWAY_WEBHOOK_ALLOW_PRIVATE", "true")
    user, tenant = owner_a
    signed_in(client, user)
    wrong = client.post("/console/alerts/channels", {"name": "", "kind": "email", "target": "not-an-address"})
    page = wrong.content.decode()
    assert wrong.status_code == 400 and not NotificationChannel.objects.exists()
    assert "The name is text of 1 to 100 characters." in page and "is not one (name@example.com)" in page
    assert 'value="not-an-address"' in page and '<option value="email" selected>' in page
    # a webhook nobody listens to: the test's outcome is on the page it returns to
    client.post("/console/alerts/channels", {"name": "hook", "kind": "webhook", "target": "http://127.0.0.1:9/hook"})
    channel = NotificationChannel.objects.get(tenant=tenant, name="hook")
    back = client.post(f"/console/alerts/channels/{channel.pk}/test", follow=True).content.decode()
    assert 'id="test-result"' in back and "Test notification to" in back and "hook" in back
    assert 'data-status="delivered"' not in back and "retried like any notification" in back
