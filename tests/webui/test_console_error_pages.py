"""Console errors are console pages (issue 43): 404, 403 and 500 answers under /console/ have the navigation and a
plain sentence, never the API's JSON or bare text; the API keeps its JSON; an HTMX piece a role may not see says so
where it would have gone instead of leaving "Looking..." for ever."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.harness.console import signed_in, signup

pytestmark = pytest.mark.django_db


def test_a_missing_console_page_is_a_console_page_and_the_api_keeps_its_json(client, owner_a):
    signed_in(client, owner_a[0])
    missing = client.get("/console/queues/nope")
    assert missing.status_code == 404 and missing["Content-Type"].startswith("text/html")
    assert "<nav>" in missing.text and '"code"' not in missing.text
    assert "Queue &#x27;nope&#x27; does not exist" in missing.text or "no such page" in missing.text.lower()
    unknown = client.get("/console/no-such-thing")
    assert unknown.status_code == 404 and "There is no such page" in unknown.text and "<nav>" in unknown.text
    api = Client().get("/api/v1/no-such-thing")
    assert api.status_code == 404 and api.json()["code"] == "not_found"


def test_a_refusal_is_a_console_page_with_navigation_and_a_way_on(client, owner_a):
    from tideway_server.tenants.choices import Role
    from tideway_server.tenants.models import Membership

    viewer, _tenant = signup("victor")
    Membership.objects.filter(user=viewer).update(tenant=owner_a[1], role=Role.VIEWER)
    signed_in(client, viewer)
    refused = client.get("/console/create-queue")
    assert refused.status_code == 403 and "<nav>" in refused.text
    assert "Your role (viewer) may not do this: it needs the &#x27;manage&#x27; scope" in refused.text
    assert "Back to the dashboard" in refused.text
    piece = client.get("/console/create-queue", HTTP_HX_REQUEST="true")
    assert piece.status_code == 200 and "<nav>" not in piece.text and "may not do this" in piece.text


def test_a_server_error_under_the_console_is_a_console_page(client, owner_a):
    from tideway_server.webui.views.errors import server_error

    signed_in(client, owner_a[0])
    request = client.get("/console/").wsgi_request
    answer = server_error(request)
    assert answer.status_code == 500 and b"Something went wrong" in answer.content and b"<nav>" in answer.content


def test_a_message_not_published_keeps_what_was_typed_and_says_why(client, owner_a, cluster):
    """A header line that is not "name: value" and a value the queue's schema refuses: the form again, 400, the
    typed key, value and headers kept, the reason in an alert (never a green "Published: refused")."""
    from tideway_server.registry.actions import do_register

    from tests.harness.console import make_queue

    user, tenant = owner_a
    cluster.bootstrap = "127.0.0.1:9"  # nothing listens: the page's own read fails, and says so
    cluster.save()
    do_register(tenant, "orders-value", text='{"type": "object", "required": ["id"]}', schema_type="JSON", acting="test")
    make_queue(tenant, cluster, "orders", status="ready", schema_subject="orders-value", schema_encoding="json")
    signed_in(client, user)
    typed = {"key": "k-1", "value": '{"id": 7}', "headers": "source: console\nno colon here", "delay_seconds": "0"}
    bad_header = client.post("/console/queues/orders/produce", typed)
    assert bad_header.status_code == 400 and "Published" not in bad_header.text
    assert "Header line 2 (&#x27;no colon here&#x27;) is not &quot;name: value&quot;." in bad_header.text
    assert 'value="k-1"' in bad_header.text and "{&quot;id&quot;: 7}</textarea>" in bad_header.text
    assert "source: console\nno colon here</textarea>" in bad_header.text
    refused = client.post("/console/queues/orders/produce", {**typed, "value": '{"no_id": 1}', "headers": ""})
    assert refused.status_code == 400 and "Not published:" in refused.text and 'role="alert"' in refused.text
    assert "{&quot;no_id&quot;: 1}</textarea>" in refused.text


def test_the_audit_export_takes_the_filter_shown_and_details_read_as_words(client, owner_a):
    """The export link sits in the piece the filter re-renders (it took the page-load filter before: 21 rows
    exported, 3 shown); details are words on the page and JSON in the CSV, never Python dicts."""
    import csv
    import io
    import json

    from tideway_server.tenants import audit

    user, tenant = owner_a
    for i in range(5):
        audit.record(tenant, "user:alice", "key.create", f"k{i}", scopes=["consume", "produce"])
    audit.record(tenant, "user:alice", "member.change_role", "walt", role="developer")
    signed_in(client, user)
    piece = client.get("/console/audit", {"action": "member.change"}, HTTP_HX_REQUEST="true")
    assert "/console/audit/export?action=member.change&actor=" in piece.text  # the export follows the filter
    assert "role: developer" in piece.text and "{&#x27;role&#x27;" not in piece.text
    keys = client.get("/console/audit", {"action": "key."}).text
    assert "scopes: consume, produce" in keys
    export = client.get("/console/audit/export", {"action": "member.change"}).content.decode()
    rows = list(csv.DictReader(io.StringIO(export)))
    assert [row["action"] for row in rows] == ["member.change_role"]
    assert json.loads(rows[0]["details"]) == {"role": "developer"} and "." not in rows[0]["time"]


def test_a_queues_settings_read_in_human_units(client, owner_a, cluster):
    from tests.harness.console import make_queue

    user, tenant = owner_a
    cluster.bootstrap = "127.0.0.1:9"
    cluster.save()
    make_queue(tenant, cluster, "orders", status="ready", mode="queue")  # 1 day, 1 MiB per partition, 1 MiB messages
    signed_in(client, user)
    shown = client.get("/console/queues/orders")
    assert shown.status_code == 200
    assert "<th>Keeps messages</th><td>1 day</td>" in shown.text and "<td>1 MiB per partition</td>" in shown.text
    assert "86400000" not in shown.text and "1048576" not in shown.text


def test_a_viewer_is_offered_no_page_or_piece_that_would_refuse_it(client, owner_a, cluster):
    """The navigation, the dashboard and a queue's page show a viewer only what its role may see (they offered
    API keys and asked for pieces that answered 403, leaving "Looking..." for ever); every link it is shown opens."""
    import re

    from tideway_server.tenants.actions import do_add_member

    from tests.harness.console import PASSWORD, make_queue

    _owner, tenant = owner_a
    cluster.bootstrap = "127.0.0.1:9"
    cluster.save()
    make_queue(tenant, cluster, "orders", status="ready")
    viewer = do_add_member(tenant, username="vera", role="viewer", password=PASSWORD, acting="test").user
    signed_in(client, viewer)
    dashboard = client.get("/console/")
    assert dashboard.status_code == 200 and "/console/keys" not in dashboard.text
    assert 'hx-get="/console/behind"' not in dashboard.text and 'id="role-note"' in dashboard.text
    queue = client.get("/console/queues/orders")
    assert queue.status_code == 200 and "/console/queues/orders/messages" not in queue.text
    assert 'hx-get="/console/queues/orders/groups"' not in queue.text
    for page_ in (dashboard, queue):
        nav = re.search(r"<nav>(.*?)</nav>", page_.text, re.S).group(1)
        for link in re.findall(r'href="(/console/[^"]*)"', nav + page_.text.split("</header>")[1]):
            if link.endswith("/delete") or link.endswith("/edit") or link == "/console/signout":
                continue
            assert client.get(link).status_code == 200, link


@pytest.fixture
def queue_of_a(client, owner_a, cluster):
    """Owner A signed in, with a queue-mode queue "orders" on a cluster whose brokers are not there."""
    from tests.harness.console import make_queue

    user, tenant = owner_a
    cluster.bootstrap = "127.0.0.1:9"
    cluster.save()
    make_queue(tenant, cluster, "orders", status="ready", mode="queue")
    signed_in(client, user)


def test_a_dry_run_of_nothing_selected_asks_for_a_selection(client, queue_of_a):
    """It said "a redrive would move 0 dead letters" (issue 43)."""
    answer = client.post("/console/queues/orders/dead-letters/redrive", {"which": "dry-run-selected"})
    assert answer.status_code == 302 and "select+dead+letters+first" in answer["Location"]
    assert "would+move" not in answer["Location"]


def test_a_new_tenant_is_shown_how_to_start_and_the_steps_tick_off(client, owner_a, cluster):
    """Sign-up led nowhere (issue 43): the dashboard's "Get started" panel links to the first queue and key, and
    gives snippets for curl, Python, a browser and Kafka clients with the tenant's queue and this site's address."""
    from tideway_server.clusters.models import Broker
    from tideway_server.tenants.actions import do_create_api_key

    from tests.harness.console import make_queue

    user, tenant = owner_a
    signed_in(client, user)
    fresh = client.get("/console/")
    assert 'href="/console/create-queue">Create your first queue' in fresh.text
    assert 'href="/console/keys">Create an API key' in fresh.text
    assert "http://testserver/api/v1/queues/orders/messages" in fresh.text  # a placeholder name until one exists
    for i in (1, 2):
        Broker.objects.create(cluster=cluster, broker_id=i, host=f"10.0.0.{i}", port=9092, kafka_host=f"10.0.0.{i}",
                              kafka_port=9095, state="alive")
    make_queue(tenant, cluster, "payments", status="ready")
    do_create_api_key(tenant, name="app", scopes=["produce", "consume"], acting="test")
    started = client.get("/console/")
    assert "✓ Your first queue" in started.text and "✓ An API key exists" in started.text
    assert "http://testserver/api/v1/queues/payments/messages" in started.text
    assert 'tideway.Client("http://testserver", KEY)' in started.text
    assert "ws://testserver/ws/v1/queues/payments?token=" in started.text
    assert "bootstrap.servers=10.0.0.1:9095,10.0.0.2:9095" in started.text


def test_a_queue_whose_cluster_cannot_be_reached_is_a_page_that_says_so(client, owner_a, cluster):
    """The message pages answered 500 when the queue's cluster had no live broker (gateway.catalog's ActionError)."""
    from tests.harness.console import make_queue

    user, tenant = owner_a
    make_queue(tenant, cluster, "orders", status="ready")  # the cluster: no broker registered, no bootstrap
    signed_in(client, user)
    answer = client.get("/console/queues/orders/messages")
    assert answer.status_code == 503 and "<nav>" in answer.text
    assert "The brokers cannot be reached" in answer.text and "has no live broker" in answer.text


def test_redriving_every_dead_letter_asks_for_the_queue_name_first(client, queue_of_a):
    """"Redrive all" moved everything in one click (issue 43)."""
    ask = client.post("/console/queues/orders/dead-letters/redrive", {"which": "all", "rate_per_s": "25"})
    assert ask.status_code == 200 and "Redrive every dead letter of orders" in ask.text and "at 25 per second" in ask.text
    assert 'name="which" value="all"' in ask.text and 'name="rate_per_s" value="25"' in ask.text
    wrong = client.post("/console/queues/orders/dead-letters/redrive", {"which": "all", "rate_per_s": "25", "confirm": "x"})
    assert wrong.status_code == 400 and "type the queue&#x27;s name (orders)" in wrong.text
