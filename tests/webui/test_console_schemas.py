"""Schemas in the console (issue 43): a new tenant registers its first subject on the schemas page, and a
version's text can be read (and copied) on the subject's page."""

from __future__ import annotations

import pytest

from tests.harness.console import PASSWORD, make_queue, signed_in
from tests.webui.test_console_views import AVRO_V1, AVRO_V2

pytestmark = pytest.mark.django_db


def test_a_first_subject_is_registered_on_the_schemas_page(client, owner_a, cluster):
    from tideway_server.registry.models import SubjectVersion

    user, tenant = owner_a
    make_queue(tenant, cluster, "orders")
    signed_in(client, user)
    empty = client.get("/console/schemas").content.decode()
    assert "Register a new subject" in empty and '<option value="orders-value">' in empty  # the queue's subject offered
    bad_name = client.post("/console/schemas", {"subject": "orders value", "schema_type": "AVRO", "schema": AVRO_V1})
    assert bad_name.status_code == 400 and "letters, digits" in bad_name.content.decode()
    assert 'value="orders value"' in bad_name.content.decode()  # kept
    bad_schema = client.post("/console/schemas", {"subject": "orders-value", "schema_type": "AVRO", "schema": '{"type": "recrd"}'})
    page = bad_schema.content.decode()
    assert bad_schema.status_code == 400 and "recrd" in page and 'value="orders-value"' in page
    assert not SubjectVersion.objects.filter(tenant=tenant).exists()
    made = client.post("/console/schemas", {"subject": "orders-value", "schema_type": "AVRO", "schema": AVRO_V1})
    assert made.status_code == 302 and made["Location"] == "/console/schemas/orders-value"
    assert SubjectVersion.objects.get(tenant=tenant, subject="orders-value").version == 1
    again = client.post("/console/schemas", {"subject": "orders-value", "schema_type": "AVRO", "schema": AVRO_V2})
    assert again.status_code == 400 and "exists: add a version on its page" in again.content.decode()


def test_a_versions_text_is_shown_pretty_and_any_version_can_be_picked(client, owner_a):
    from tideway_server.registry.actions import do_register
    from tideway_server.tenants.actions import do_add_member

    user, tenant = owner_a
    do_register(tenant, "orders-value", text=AVRO_V1, acting="test")
    do_register(tenant, "orders-value", text=AVRO_V2, acting="test")
    signed_in(client, user)
    latest = client.get("/console/schemas/orders-value").content.decode()
    assert "<h2>Version 2</h2>" in latest and "&quot;note&quot;" in latest.split('id="schema-text"')[1].split("</pre>")[0]
    first = client.get("/console/schemas/orders-value", {"v": "1"}).content.decode()
    text = first.split('id="schema-text"')[1].split("</pre>")[0]
    assert "<h2>Version 1</h2>" in first and "&quot;id&quot;" in text and "note" not in text
    assert '\n  &quot;fields&quot;: [' in text  # indented, not one long line
    viewer = do_add_member(tenant, username="vera", role="viewer", password=PASSWORD, acting="test").user
    signed_in(client, viewer)
    assert "Register a new subject" not in client.get("/console/schemas").content.decode()
    assert client.post("/console/schemas", {"subject": "x-value", "schema": AVRO_V1}).status_code == 403
