"""The console's pages for members: sign-up and sign-in, roles, tenant isolation, the queue pages (issue 16, part)."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver

from tests.harness.console import PASSWORD, make_queue, signed_in

pytestmark = pytest.mark.django_db

AVRO_V1 = '{"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}'
AVRO_V2 = ('{"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}, '
           '{"name": "note", "type": "string", "default": ""}]}')
AVRO_BREAKING = '{"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]}'


def test_the_root_leads_to_the_console_and_the_console_to_sign_in(client):
    assert client.get("/").headers["Location"] == "/console/"
    answer = client.get("/console/queues")
    assert answer.status_code == 302 and answer.headers["Location"] == "/console/signin?next=/console/queues"


def _signup_link(client, email: str) -> str:
    answer = client.post("/console/signup", {"email": email})
    assert answer.status_code == 200 and "Check your inbox" in answer.text
    return answer.text.split('id="signup-link"')[0].rsplit('href="', 1)[1].split('"')[0].removeprefix("http://testserver")


def test_sign_up_sends_a_link_then_creates_the_tenant_and_signs_in(client, owner_a):
    from django.core import mail

    link = _signup_link(client, "carol@example.com")
    assert mail.outbox[-1].to == ["carol@example.com"] and link in mail.outbox[-1].body
    answer = client.post(link, {"username": "carol", "password": PASSWORD, "tenant_name": "Carol Ltd"})
    assert answer.status_code == 302
    dashboard = client.get("/console/")
    assert dashboard.status_code == 200 and "Carol Ltd" in dashboard.text
    assert "member.add" in dashboard.text  # the same audit row the API writes
    assert "exists: sign in" in Client().get(link).text  # the link has done its work
    short = Client().post(_signup_link(Client(), "d@example.com"), {"username": "dave", "password": "short", "tenant_name": "D"})
    assert short.status_code == 400 and "at least 10 characters" in short.text
    assert Client().get("/console/signup/forged-token-1234").status_code == 404


def test_sign_up_never_says_which_user_names_or_addresses_exist(client, owner_a):
    """It said "the user name 'alice' is taken" to anyone (issue 43): the first step asks only for an address and
    answers the same for every one; only the holder of the e-mailed link sees a name is taken."""
    def sent(email):
        page = Client().post("/console/signup", {"email": email}).text
        return page.split('role="status">')[1].split("</p>")[0].replace(email, "X")

    assert sent("alice@example.com") == sent("nobody-here@example.com")  # alice has an account; nobody does
    from django.test import override_settings

    with override_settings(SIGNUP_LINK_ON_PAGE=False):  # production: the link only by e-mail
        assert 'id="signup-link"' not in Client().post("/console/signup", {"email": "eve@example.com"}).text
    link = _signup_link(client, "frank@example.com")
    taken = client.post(link, {"username": "alice", "password": PASSWORD, "tenant_name": "F"})
    assert taken.status_code == 400 and "is taken" in taken.text  # to the address's owner only


def test_sign_up_links_to_one_address_are_bounded(client):
    """The site cannot be made to flood an inbox: at most 3 links an hour to one address (the page says the same)."""
    from django.core import mail
    from django.core.cache import cache

    cache.clear()
    pages = [Client().post("/console/signup", {"email": "victim@example.com"}) for _ in range(5)]
    assert all(p.status_code == 200 and "Check your inbox" in p.text for p in pages)
    assert len([m for m in mail.outbox if m.to == ["victim@example.com"]]) == 3


def test_sign_in_is_throttled_after_repeated_failures(owner_a):
    client = Client()
    for _ in range(5):
        assert client.post("/console/signin", {"username": "alice", "password": "wrong"}).status_code == 400
    locked = client.post("/console/signin", {"username": "alice", "password": PASSWORD})
    assert locked.status_code == 429 and "too many failed attempts" in locked.text
    assert client.get("/console/").status_code == 302  # not signed in
    other = Client(REMOTE_ADDR="10.0.0.9").post("/console/signin", {"username": "alice", "password": PASSWORD})
    assert other.status_code == 302  # another address is not locked out


def test_every_form_needs_its_csrf_token(owner_a):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner_a[0])
    assert client.post("/console/create-queue", {"name": "x"}).status_code == 403
    assert client.post("/console/signout").status_code == 403


def test_queue_list_searches_sorts_pages_and_answers_htmx_with_rows_only(client, owner_a, cluster):
    user, tenant = owner_a
    for i in range(60):
        make_queue(tenant, cluster, f"orders-{i:02d}", partitions=1 + i % 4)
    make_queue(tenant, cluster, "payments")
    signed_in(client, user)
    first = client.get("/console/queues")
    assert first.status_code == 200 and "61 queues" in first.text and "page 1 of 2" in first.text
    assert "orders-00" in first.text and "payments" not in first.text
    found = client.get("/console/queues", {"q": "pay"})
    assert "payments" in found.text and "orders-00" not in found.text
    newest_first = client.get("/console/queues", {"sort": "-created"})
    assert newest_first.text.index("payments") < newest_first.text.index("orders-59")
    rows = client.get("/console/queues", {"q": "orders-1"}, HTTP_HX_REQUEST="true")
    assert "<html" not in rows.text and rows.text.count("/console/queues/orders-1") == 10


def test_the_create_form_shows_the_apis_validation_messages_and_creates_nothing(client, owner_a, cluster):
    from tideway_server.topics.models import Queue

    signed_in(client, owner_a[0])
    form = client.get("/console/create-queue")
    assert form.status_code == 200
    labels = set(re.findall(r'<label for="([^"]+)"', form.text))
    inputs = set(re.findall(r'<(?:input|select)[^>]* id="([^"]+)"', form.text))
    assert inputs <= labels, f"fields without a label: {inputs - labels}"  # every field has its label
    refused = client.post("/console/create-queue", {"name": "bad name!", "partitions": "0", "mode": "queue"})
    assert refused.status_code == 400
    assert "at least 1 partition" in refused.text  # the API serializer's own message, in words (issue 43)
    assert "use 1 to 100 letters, digits, &#x27;.&#x27;, &#x27;_&#x27; or &#x27;-&#x27;" in refused.text
    assert "name" in refused.text and not Queue.objects.exists()


def test_the_edit_form_changes_only_what_may_change_with_the_apis_messages(client, owner_a, cluster):
    from tideway_server.topics.models import Queue

    user, tenant = owner_a
    make_queue(tenant, cluster, "orders", partitions=2, status="ready")
    signed_in(client, user)
    form = client.get("/console/queues/orders/edit")
    assert form.status_code == 200
    labels = set(re.findall(r'<label for="([^"]+)"', form.text))
    assert set(re.findall(r'<(?:input|select)[^>]* id="([^"]+)"', form.text)) <= labels
    assert re.search(r'id="f-name" name="name" required disabled', form.text)  # fixed at creation: shown, not sent
    assert 'value="2"' in form.text  # the current partition count
    shrink = client.post("/console/queues/orders/edit", {"partitions": "1", "schema_subject": ""})
    assert shrink.status_code == 400 and "can only grow" in shrink.text  # the control plane's own rule and message
    short = client.post("/console/queues/orders/edit", {"retention_ms": "5", "schema_subject": ""})
    assert short.status_code == 400 and "at least 1 minute (60,000 ms)" in short.text  # the API serializer's message
    queue = Queue.objects.get(name="orders")
    assert queue.partitions == 2 and queue.retention_ms == 86_400_000  # nothing changed


def test_a_viewer_sees_no_controls_and_a_forged_post_is_refused(client, owner_a, cluster):
    from tideway_server.tenants.actions import do_add_member
    from tideway_server.topics.models import Queue

    _, tenant = owner_a
    make_queue(tenant, cluster, "orders")
    viewer = do_add_member(tenant, username="victor", role="viewer", password=PASSWORD, acting="test").user
    signed_in(client, viewer)
    listing = client.get("/console/queues")
    assert listing.status_code == 200 and "orders" in listing.text and "Create a queue" not in listing.text
    assert "Delete this queue" not in client.get("/console/queues/orders").text
    assert "Edit settings" not in client.get("/console/queues/orders").text
    assert client.get("/console/queues/orders/edit").status_code == 403
    assert client.post("/console/queues/orders/edit", {"max_deliveries": "9"}).status_code == 403
    assert client.get("/console/create-queue").status_code == 403
    assert client.post("/console/create-queue", {"name": "sneaky", "mode": "queue"}).status_code == 403
    assert client.post("/console/queues/orders/delete", {"confirm": "orders"}).status_code == 403
    assert Queue.objects.filter(name="orders").exists() and not Queue.objects.filter(name="sneaky").exists()


def test_a_queue_page_shows_partitions_from_the_controller_and_says_when_brokers_do_not_answer(client, owner_a, cluster):
    from tideway_server.clusters.models import Partition, Topic

    user, tenant = owner_a
    queue = make_queue(tenant, cluster, "orders", partitions=2)
    topic = Topic.objects.create(cluster=cluster, name=queue.broker_topic, partition_count=2, replication_factor=3)
    Partition.objects.create(topic=topic, index=0, replicas=[1, 2, 3], isr=[1, 2, 3], leader=1)
    Partition.objects.create(topic=topic, index=1, replicas=[2, 3, 1], isr=[2, 3], leader=2)
    signed_in(client, user)
    answer = client.get("/console/queues/orders")
    assert answer.status_code == 200
    assert "broker 1" in answer.text and "broker 2" in answer.text and "2, 3, 1" in answer.text
    assert "the brokers did not answer" in answer.text
    assert f"t{tenant.id}." not in answer.text  # the tenant's own names only, never the broker-side one


def _console_urls() -> list[str]:
    """Every console route, from the URL conf (a new page is covered without touching this test)."""
    from tideway_server.webui import urls

    out = []
    for pattern in urls.urlpatterns:
        assert isinstance(pattern, URLPattern | URLResolver)
        route = str(pattern.pattern).lstrip("^").rstrip("$")
        route = re.sub(r"\(\?P<job_id>[^)]*\)", "0" * 32, route)
        route = re.sub(r"\(\?P<prefix>[^)]*\)", "<prefix>", route)
        route = re.sub(r"\(\?P<group>[^)]*\)", "g1", route)
        route = re.sub(r"\(\?P<subject>[^)]*\)", "<name>", route)
        route = re.sub(r"\(\?P<slug>[^)]*\)", "<slug>", route)
        route = re.sub(r"\(\?P<invoice_id>[^)]*\)", "<invoice>", route).replace("\\.", ".")
        route = re.sub(r"\(\?P<rule_id>[^)]*\)", "<rule>", route)
        route = re.sub(r"\(\?P<channel_id>[^)]*\)", "<channel>", route)
        route = re.sub(r"\(\?P<token>[^)]*\)", "not-a-signed-invitation", route)
        route = re.sub(r"\(\?P<name>[^)]*\)", "<name>", route)
        actions = re.search(r"\(\?P<action>([^)]*)\)", route)
        if actions:  # one URL per action the route takes
            out += ["/console/" + route.replace(actions.group(0), a) for a in actions.group(1).split("|")]
        else:
            out.append("/console/" + route)
    return out


def _alerting(tenant, name: str):
    """A rule and an e-mail channel of ``tenant``, for the walks."""
    from tideway_server.alerts.actions import do_create_channel, do_create_rule

    channel, _ = do_create_channel(tenant, {"name": f"{name}-mail", "kind": "email", "email": "ops@example.com"}, acting="t")
    rule = do_create_rule(tenant, {"name": f"{name}-rule", "metric": "lag", "threshold": 5, "channels": [channel.name]},
                          acting="t")
    return rule, channel


def test_tenant_b_sees_and_changes_nothing_of_tenant_a_on_any_console_url(owner_a, owner_b, cluster):
    from tideway_server.tenants.actions import do_create_api_key
    from tideway_server.topics.models import Queue

    _, tenant_a = owner_a
    make_queue(tenant_a, cluster, "secret-orders")
    key_a, _ = do_create_api_key(tenant_a, name="a's key", scopes=["consume"], acting="test")
    from tideway_server.registry.actions import do_register

    do_register(tenant_a, "secret-orders", text=AVRO_V1, acting="test")
    from tideway_server.billing.pricing import refresh_invoice

    invoice_a = refresh_invoice(tenant_a, "2026-10")
    rule_a, channel_a = _alerting(tenant_a, "secret-orders")
    client = signed_in(Client(), owner_b[0])
    urls = _console_urls()
    assert "/console/invoices/<invoice>.csv" in urls
    for url in (u for u in urls if "<invoice>" in u):  # (before the walk signs B out)
        assert client.get(url.replace("<invoice>", str(invoice_a.pk))).status_code == 404, url  # A's invoice: none for B
    assert "/console/queues/<name>" in urls and "/console/create-queue" in urls and "/console/keys/<prefix>/revoke" in urls
    for url in urls:
        target = url.replace("<name>", "secret-orders").replace("<prefix>", key_a.prefix).replace("<slug>", tenant_a.slug)
        target = target.replace("<invoice>", str(invoice_a.pk)).replace("<rule>", str(rule_a.pk))
        target = target.replace("<channel>", str(channel_a.pk))
        for method in ("get", "post"):
            answer = getattr(client, method)(target, {"confirm": "secret-orders", "tenant": tenant_a.slug})
            assert "secret-orders" not in answer.content.decode(errors="replace"), (method, target)
            assert answer.status_code in (200, 302, 400, 403, 404, 405), (method, target, answer.status_code)
    assert Queue.objects.filter(name="secret-orders").exists()
    key_a.refresh_from_db()
    tenant_a.refresh_from_db()
    assert key_a.revoked_at is None and tenant_a.suspended_at is None
    rule_a.refresh_from_db()
    channel_a.refresh_from_db()  # (both still there, unchanged)
    assert rule_a.silenced_until is None and rule_a.enabled and len(channel_a.secrets) == 0
    assert key_a.prefix not in client.get("/console/keys").text
    dashboard = client.get("/console/")
    assert tenant_a.name not in dashboard.text  # the tenant switch to A was refused


def test_a_viewer_changes_nothing_through_any_console_form(owner_a, cluster):
    """Every console URL that takes a POST, as a viewer: refused (403), nothing changed, no audit row."""
    from tideway_server.tenants.actions import do_add_member, do_create_api_key
    from tideway_server.tenants.models import AuditEntry
    from tideway_server.topics.models import Queue

    _, tenant = owner_a
    make_queue(tenant, cluster, "orders")
    key, _ = do_create_api_key(tenant, name="ci", scopes=["consume"], acting="test")
    viewer = do_add_member(tenant, username="vera", role="viewer", password=PASSWORD, acting="test").user
    rule, channel = _alerting(tenant, "orders")
    client = signed_in(Client(), viewer)
    audit_rows = AuditEntry.objects.count()
    own_account = {"/console/signout", "/console/tenant", "/console/password", "/console/signin", "/console/signup",
                   "/console/invitations/not-a-signed-invitation", "/console/signup/not-a-signed-invitation"}
    for url in _console_urls():
        if url in own_account:
            continue
        target = url.replace("<name>", "orders").replace("<prefix>", key.prefix).replace("<slug>", tenant.slug)
        target = target.replace("<invoice>", "1").replace("<rule>", str(rule.pk)).replace("<channel>", str(channel.pk))
        answer = client.post(target, {"name": "x", "confirm": "orders", "scopes": ["manage"], "value": "v", "which": "all"})
        assert answer.status_code in (403, 405), (target, answer.status_code)  # refused, or a page that takes no POST
    assert Queue.objects.filter(name="orders").exists() and Queue.objects.count() == 1
    key.refresh_from_db()
    assert key.revoked_at is None and AuditEntry.objects.count() == audit_rows
    rule.refresh_from_db()
    channel.refresh_from_db()  # (both still there)


def test_api_keys_are_shown_once_and_revoked_by_owners_only(client, owner_a):
    from tideway_server.tenants.actions import do_add_member
    from tideway_server.tenants.models import ApiKey

    user, tenant = owner_a
    signed_in(client, user)
    created = client.post("/console/keys", {"name": "ci", "scopes": ["produce", "consume"], "queue_patterns": "orders-*"})
    assert created.status_code == 200
    secret = re.search(r'id="new-key" readonly value="(tw_[^"]+)"', created.text).group(1)
    row = ApiKey.objects.get(tenant=tenant, name="ci")
    assert row.scopes == ["consume", "produce"] and row.queue_patterns == ["orders-*"]
    listing = client.get("/console/keys")
    assert row.prefix in listing.text and secret not in listing.text  # shown once
    developer = do_add_member(tenant, username="dev", role="developer", password=PASSWORD, acting="test").user
    as_developer = signed_in(Client(), developer)
    assert as_developer.get("/console/keys").status_code == 200
    assert as_developer.post(f"/console/keys/{row.prefix}/revoke").status_code == 403
    asked = client.get(f"/console/keys/{row.prefix}/revoke")  # a typed confirmation first (issue 43)
    assert asked.status_code == 200 and "This cannot be undone" in asked.text
    assert client.post(f"/console/keys/{row.prefix}/revoke", {"confirm": "c"}).status_code == 400
    row.refresh_from_db()
    assert row.revoked_at is None
    assert client.post(f"/console/keys/{row.prefix}/revoke", {"confirm": "ci"}).status_code == 302
    row.refresh_from_db()
    assert row.revoked_at is not None


def test_members_are_managed_by_owners_and_every_change_is_in_the_audit_log(client, owner_a, owner_b):
    from tideway_server.tenants.actions import do_add_member

    user, tenant = owner_a
    signed_in(client, user)
    do_add_member(tenant, username="walt", role="viewer", password=PASSWORD, acting="test")  # (joined by invitation)
    assert client.post("/console/members", {"action": "role", "username": "walt", "role": "developer"}).status_code == 200
    last_owner = client.post("/console/members", {"action": "remove", "username": "alice", "confirm": "alice"})
    assert last_owner.status_code == 400 and "at least one owner" in last_owner.text
    asked = client.post("/console/members", {"action": "remove", "username": "walt"})  # confirm first (issue 43)
    assert asked.status_code == 200 and "Type their user name" in asked.text
    assert "walt" in client.get("/console/members").text
    assert client.post("/console/members", {"action": "remove", "username": "walt", "confirm": "wal"}).status_code == 400
    removed = client.post("/console/members", {"action": "remove", "username": "walt", "confirm": "walt"})
    assert removed.status_code == 200 and "walt was removed" in removed.text
    audit = client.get("/console/audit", {"action": "member."})
    assert "member.change_role" in audit.text and "walt" in audit.text
    export = client.get("/console/audit/export", {"actor": "user:alice"})
    assert export["Content-Type"].startswith("text/csv")
    lines = export.content.decode().splitlines()
    assert lines[0] == "time,actor,action,target,details" and any("member.change_role" in line for line in lines[1:])
    # Another tenant's owner sees none of it.
    other = signed_in(Client(), owner_b[0])
    assert "walt" not in other.get("/console/audit").text and "walt" not in other.get("/console/members").text
    assert "walt" not in other.get("/console/audit/export").content.decode()


def test_operator_pages_are_for_staff_only(client, owner_a, owner_b, cluster):
    from django.contrib.auth import get_user_model
    from tideway_server.clusters.models import Broker, Partition, Topic

    _, tenant = owner_a
    make_queue(tenant, cluster, "orders")
    Broker.objects.create(cluster=cluster, broker_id=1, host="127.0.0.1", port=9401, state="alive")
    Broker.objects.create(cluster=cluster, broker_id=2, host="127.0.0.1", port=9402, state="fenced")
    topic = Topic.objects.create(cluster=cluster, name="t1.orders", partition_count=1, replication_factor=2)
    Partition.objects.create(topic=topic, index=0, replicas=[1, 2], isr=[1], leader=1)
    for url in ("/console/operator/clusters", "/console/operator/tenants", "/console/operator/plans"):
        assert signed_in(Client(), owner_a[0]).get(url).status_code == 403
    staff = get_user_model().objects.create_user("olga", password=PASSWORD, is_staff=True)
    signed_in(client, staff)
    clusters = client.get("/console/operator/clusters")
    assert clusters.status_code == 200 and "1 under-replicated" in clusters.text and "fenced" in clusters.text
    tenants = client.get("/console/operator/tenants")
    assert tenant.slug in tenants.text and owner_b[1].slug in tenants.text
    assert "Team" in client.get("/console/operator/plans").text


def test_message_export_can_be_turned_off_for_the_tenant_by_its_owners(client, owner_a, cluster):
    from tideway_server.tenants.actions import do_add_member
    from tideway_server.tenants.models import AuditEntry

    user, tenant = owner_a
    make_queue(tenant, cluster, "orders")
    developer = do_add_member(tenant, username="dora", role="developer", password=PASSWORD, acting="test").user
    as_developer = signed_in(Client(), developer)
    assert as_developer.post("/console/settings", {}).status_code == 403  # owners and admins only
    signed_in(client, user)
    assert client.post("/console/settings", {}).status_code == 200  # unchecked: export off
    tenant.refresh_from_db()
    assert tenant.message_export is False
    assert AuditEntry.objects.filter(tenant=tenant, action="tenant.message_export").exists()
    refused = as_developer.get("/console/queues/orders/messages/export", {"format": "csv"})
    assert refused.status_code == 403 and "turned message export off" in refused.text


def test_schemas_show_versions_a_diff_and_check_a_new_version_before_registering(client, owner_a):
    from tideway_server.registry.actions import do_register
    from tideway_server.registry.models import SubjectVersion
    from tideway_server.tenants.actions import do_add_member

    user, tenant = owner_a
    do_register(tenant, "orders-value", text=AVRO_V1, acting="test")
    do_register(tenant, "orders-value", text=AVRO_V2, acting="test")
    signed_in(client, user)
    listing = client.get("/console/schemas")
    assert "orders-value" in listing.text
    subject = client.get("/console/schemas/orders-value", {"a": 1, "b": 2})
    assert subject.status_code == 200 and '+      &quot;name&quot;: &quot;note&quot;' in subject.text  # the added field, in the diff
    refused = client.post("/console/schemas/orders-value", {"action": "check", "schema_type": "AVRO", "schema": AVRO_BREAKING})
    assert "Incompatible" in refused.text
    registered = client.post("/console/schemas/orders-value", {"action": "register", "schema_type": "AVRO", "schema": AVRO_BREAKING})
    assert "Incompatible" in registered.text and SubjectVersion.objects.filter(subject="orders-value").count() == 2
    assert client.post("/console/schemas/orders-value", {"action": "level", "level": "NONE"}).status_code == 200
    viewer = do_add_member(tenant, username="vic", role="viewer", password=PASSWORD, acting="test").user
    assert signed_in(Client(), viewer).post("/console/schemas/orders-value", {"action": "level", "level": "FULL"}).status_code == 403
    accepted = client.post("/console/schemas/orders-value", {"action": "register", "schema_type": "AVRO", "schema": AVRO_BREAKING})
    assert "registered as version 3" in accepted.text


def test_an_operator_suspends_a_tenant_and_its_members_and_keys_are_refused_until_resumed(client, owner_a, owner_b):
    from django.contrib.auth import get_user_model
    from rest_framework.exceptions import AuthenticationFailed
    from tideway_server.controlplane.api.auth import principal_for_key
    from tideway_server.tenants.actions import do_create_api_key

    user, tenant = owner_a
    _, key = do_create_api_key(tenant, name="ci", scopes=["consume"], acting="test")
    staff = get_user_model().objects.create_user("otto", password=PASSWORD, is_staff=True)
    operator = signed_in(client, staff)
    assert signed_in(Client(), owner_b[0]).post(f"/console/operator/tenants/{tenant.slug}/suspend", {"suspended": "1"}).status_code == 403
    # a suspension asks for the tenant's slug first (resuming does not: it takes nothing away)
    ask = operator.get(f"/console/operator/tenants/{tenant.slug}/suspend")
    assert ask.status_code == 200 and "Resume it on the tenants page" in ask.text
    assert operator.post(f"/console/operator/tenants/{tenant.slug}/suspend", {"suspended": "1"}).status_code == 400
    assert signed_in(Client(), user).get("/console/queues").status_code == 200  # not suspended yet
    assert operator.post(f"/console/operator/tenants/{tenant.slug}/suspend",
                         {"suspended": "1", "confirm": tenant.slug}).status_code == 302
    member = signed_in(Client(), user)
    refused = member.get("/console/queues")
    assert refused.status_code == 403 and "suspended" in refused.text
    with pytest.raises(AuthenticationFailed, match="suspended"):
        principal_for_key(key)
    assert signed_in(Client(), owner_b[0]).get("/console/queues").status_code == 200  # others go on
    operator.post(f"/console/operator/tenants/{tenant.slug}/suspend", {"suspended": "0"})
    assert member.get("/console/queues").status_code == 200 and principal_for_key(key).tenant == tenant
