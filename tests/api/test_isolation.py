"""Tenant isolation and scopes over every endpoint of the API.

The endpoints come from Django's URL conf, so a new one is walked without
changing this test. Tenant B owns one of everything (a queue, a key, a
member, a schema subject and its compatibility level); tenant A's key with
every scope then calls every method of every endpoint with B's identifiers
in the path: nothing of B may be read (no B identifier in any answer),
listed, changed or deleted (B's state, read back with B's key, is equal
before and after). And for every method that needs a scope, a key of A
lacking just that scope is refused with 403.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.harness.processes import REPO_ROOT

METHODS = ("get", "post", "put", "patch", "delete")
AVRO = '{"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}'


def _endpoints() -> list[tuple[str, list[str], dict]]:
    """(path template with {param}, methods, view attributes) for every API endpoint, from the URL conf.

    Read in a subprocess so this test process does not start Django.
    """
    script = r'''
import json, re, sys
from tideway_server.cli.django_setup import setup_django
setup_django()
from django.urls import get_resolver
from django.urls.resolvers import URLPattern, URLResolver
from tideway_server.controlplane.api.permissions import required_scope
out = []
def walk(patterns, prefix):
    for p in patterns:
        if isinstance(p, URLResolver):
            walk(p.url_patterns, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            view = getattr(p.callback, "view_class", None)
            if view is None:
                continue
            route = prefix + str(p.pattern)
            route = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", route)
            route = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route).replace("^", "").replace("$", "")
            methods = [m for m in ("get", "post", "put", "patch", "delete") if hasattr(view, m)]
            out.append(["/" + route, methods, {
                "operator_only": getattr(view, "operator_only", False), "public": getattr(view, "public", False),
                "scopes": {m: required_scope(view, m.upper()) for m in methods}}])
walk(get_resolver().url_patterns, "")
print(json.dumps(out))
'''
    import json

    out = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    return [tuple(e) for e in json.loads(out.stdout) if e[0].startswith("/api/v1/")]


ENDPOINTS = _endpoints()


def test_the_walk_covers_every_kind_of_resource():
    paths = {path for path, _, _ in ENDPOINTS}
    for expected in ("/api/v1/queues/{name}", "/api/v1/keys/{prefix}", "/api/v1/members/{username}", "/api/v1/audit/",
                     "/api/v1/registry/subjects/{subject}/versions/{version}", "/api/v1/registry/schemas/ids/{schema_id}",
                     "/api/v1/operator/clusters/{name}", "/api/v1/queues/{name}/messages",
                     "/api/v1/queues/{name}/groups/{group}/receive", "/api/v1/queues/{name}/groups/{group}/ack",
                     "/api/v1/queues/{name}/partitions/{partition}/messages", "/api/v1/queues/{name}/dead-letters/redrive",
                     "/api/v1/queues/{name}/groups/{group}/members/{member_id}", "/api/v1/alerts/{rule_id}/history",
                     "/api/v1/notification-channels/{channel_id}/test", "/api/v1/queues/{name}/groups/{group}/lag"):
        assert expected in paths


@pytest.fixture(scope="module")
def tenants(control_plane):
    """Tenant B with one of everything; tenant A with its own, differently named, things."""
    made = {}
    for label in ("a", "b"):
        slug, key = control_plane.create_tenant(plan="team")
        with control_plane.client(key) as api:
            queue = f"{label}-queue"
            assert api.post("/api/v1/queues/", json={"name": queue, "replication_factor": 1}).status_code == 201
            extra_key = api.post("/api/v1/keys/", json={"name": f"{label}-key", "scopes": ["consume"]}).json()
            username = control_plane.unique(f"{label}-member")
            assert control_plane.add_member(api, username, "developer", "a-long-password").status_code == 201
            invitation = api.post("/api/v1/invitations/", json={"email": f"{label}-waiting@example.com"}).json()["id"]
            subject = f"{label}-subject"
            schema_id = api.post(f"/api/v1/registry/subjects/{subject}/versions", json={"schema": AVRO}).json()["id"]
            assert api.put(f"/api/v1/registry/config/{subject}", json={"compatibility": "FULL"}).status_code == 200
            assert api.post(f"/api/v1/queues/{queue}/messages", json={"messages": [{"value": f"{label}-message"}]}).status_code == 200
            assert api.post(f"/api/v1/queues/{queue}/groups/g/offsets", json={"offsets": [{"partition": 0, "offset": 1}]}).status_code == 200
            job = api.post(f"/api/v1/queues/{queue}/dead-letters/redrive", json={}).json()["job_id"]
            member = api.post(f"/api/v1/queues/{queue}/groups/g/members", json={}).json()["member_id"]
            channel = api.post("/api/v1/notification-channels/", json={"name": f"{label}-channel", "kind": "email",
                                                                      "email": f"{label}@example.com"}).json()["id"]
            rule = api.post("/api/v1/alerts/", json={"name": f"{label}-rule", "metric": "lag", "queue": queue, "threshold": 10,
                                                     "channels": [f"{label}-channel"]}).json()["id"]
        made[label] = {"slug": slug, "key": key, "name": queue, "prefix": extra_key["prefix"], "username": username,
                       "subject": subject, "schema_id": schema_id, "version": "1", "group": "g", "partition": 0,
                       "member_id": member, "job_id": job, "rule_id": rule, "channel_id": channel,
                       "invitation_id": invitation}
    # An invoice each (the usage job makes them; here straight from the pricing code, in the deployment's database).
    script = ("import json; from tideway_server.billing.pricing import refresh_invoice; "
              "from tideway_server.tenants.models import Tenant; "
              f"print(json.dumps({{s: refresh_invoice(Tenant.objects.get(slug=s), '2026-10').pk for s in "
              f"{[made['a']['slug'], made['b']['slug']]!r}}}))")
    done = subprocess.run([sys.executable, "manage.py", "shell", "-c", script], cwd=REPO_ROOT, env=control_plane.env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    invoices = json.loads(done.stdout.strip().splitlines()[-1])
    for label in ("a", "b"):
        made[label]["invoice_id"] = invoices[made[label]["slug"]]
    return made


def _state(control_plane, key: str, ids: dict) -> dict:
    """Everything a tenant owns, read with its own key."""
    with control_plane.client(key) as api:
        return {
            "queues": api.get("/api/v1/queues/").json(),
            "keys": [{k: v for k, v in row.items() if k != "last_used_at"} for row in api.get("/api/v1/keys/").json()],
            "members": api.get("/api/v1/members/").json(),
            "invitations": api.get("/api/v1/invitations/").json(),
            "subjects": api.get("/api/v1/registry/subjects").json(),
            "versions": api.get(f"/api/v1/registry/subjects/{ids['subject']}/versions").json(),
            "level": api.get(f"/api/v1/registry/config/{ids['subject']}").json(),
            "schema": api.get(f"/api/v1/registry/schemas/ids/{ids['schema_id']}").json(),
            "audit": api.get("/api/v1/audit/").json(),
            "messages": api.get(f"/api/v1/queues/{ids['name']}/messages").json(),
            "offsets": api.get(f"/api/v1/queues/{ids['name']}/groups/g/offsets").json(),
            "dead_letters": api.get(f"/api/v1/queues/{ids['name']}/dead-letters").json(),
            "alerts": [{k: v for k, v in r.items() if k not in ("state", "state_since", "value", "evaluated")}
                       for r in api.get("/api/v1/alerts/").json()],  # (the evaluator may run meanwhile)
            "channels": api.get("/api/v1/notification-channels/").json(),
        }


# Subjects are names in the caller's own namespace: these create or change the caller's subject.
NAMESPACED_WRITES = {("post", "/api/v1/registry/subjects/{subject}/versions"), ("put", "/api/v1/registry/config/{subject}")}
MISSING = {"slug": "no-such-tenant", "name": "no-such-queue", "prefix": "0123456789ab", "username": "no-such-user",
           "subject": "no-such-subject", "schema_id": 987654321, "version": "1", "group": "g", "partition": 0,
           "member_id": "0" * 32, "job_id": "0" * 32, "invoice_id": 987654321, "rule_id": 987654321, "channel_id": 987654321,
           "invitation_id": 987654321}


def _fill(path: str, ids: dict) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: str(ids[m.group(1)]), path)


def _body(path: str) -> dict:
    """A body that would be accepted if the target were the caller's own."""
    if "/registry/" in path:
        return {"schema": AVRO, "compatibility": "NONE"}
    if "/members/" in path:
        return {"role": "viewer"}
    return {"retention_ms": 120_000, "name": "x", "scopes": ["produce"]}


def test_a_key_of_one_tenant_cannot_read_list_change_or_delete_anything_of_another(control_plane, tenants):
    a, b = tenants["a"], tenants["b"]
    before = _state(control_plane, b["key"], b)
    b_identifiers = [b["name"], b["prefix"], b["username"], b["subject"], b["slug"], "b-message", b["member_id"], b["job_id"],
                     "b-rule", "b-channel", "b@example.com"]
    walked = 0
    with control_plane.client(a["key"]) as api:
        for path, methods, view in ENDPOINTS:
            if view["public"]:
                continue
            has_params = "{" in path
            for method in methods:
                url = _fill(path, b)
                if (method == "post" and not has_params) or (method, path) in NAMESPACED_WRITES:
                    continue  # creates in the caller's own tenant: done last, below
                answer = api.request(method.upper(), url, json=_body(path) if method in ("post", "put", "patch") else None)
                walked += 1
                if view["operator_only"]:
                    assert answer.status_code == 403, f"{method.upper()} {url}: {answer.status_code}"
                    continue
                if has_params and not path.endswith("/compatibility/subjects/{subject}/versions"):
                    assert answer.status_code in (404, 403), f"{method.upper()} {url} answered {answer.status_code}: {answer.text[:300]}"
                if answer.status_code >= 400:
                    # Indistinguishable from asking for something that exists nowhere: B's things stay unseen.
                    missing = api.request(method.upper(), _fill(path, MISSING), json=_body(path) if method in ("post", "put", "patch") else None)
                    assert (answer.status_code, answer.json()["code"]) == (missing.status_code, missing.json()["code"]), url
                else:
                    leaked = [i for i in b_identifiers if i in answer.text]
                    assert not leaked, f"{method.upper()} {url} shows tenant B's {leaked}"
    assert walked >= 30
    assert _state(control_plane, b["key"], b) == before
    # Writing to a subject named like B's makes A's own subject; B's stays as it was.
    with control_plane.client(a["key"]) as api:
        for method, path in sorted(NAMESPACED_WRITES):
            assert api.request(method.upper(), _fill(path, b), json=_body(path)).status_code == 200
        assert b["subject"] in api.get("/api/v1/registry/subjects").json()
    assert _state(control_plane, b["key"], b) == before


def test_a_key_without_the_needed_scope_is_refused_everywhere(control_plane, tenants):
    a = tenants["a"]
    checked = 0
    for scope in ("produce", "consume", "manage"):
        others = [s for s in ("produce", "consume", "manage") if s != scope]
        with control_plane.client(a["key"]) as api:
            limited = api.post("/api/v1/keys/", json={"name": f"without-{scope}", "scopes": others}).json()["key"]
        with control_plane.client(limited) as api:
            for path, methods, view in ENDPOINTS:
                if view["public"] or view["operator_only"]:
                    continue
                for method in methods:
                    if view["scopes"][method] != scope:
                        continue
                    url = _fill(path, a)
                    answer = api.request(method.upper(), url, json=_body(path) if method in ("post", "put", "patch") else None)
                    assert answer.status_code == 403, f"{method.upper()} {url} without {scope}: {answer.status_code} {answer.text[:200]}"
                    assert answer.json()["code"] == "forbidden" and scope in answer.json()["message"]
                    checked += 1
    assert checked >= 15


def test_wrong_missing_and_revoked_keys_are_refused(control_plane, tenants):
    a = tenants["a"]
    with control_plane.client() as anonymous:
        answer = anonymous.get("/api/v1/queues/")
        assert answer.status_code == 401 and answer.json()["code"] == "unauthenticated"
    with control_plane.client("tw_000000000000_not-a-real-secret") as wrong:
        answer = wrong.get("/api/v1/queues/")
        assert answer.status_code == 401 and answer.json()["code"] == "invalid_credentials"
    with control_plane.client(a["key"]) as api:
        created = api.post("/api/v1/keys/", json={"name": "short-lived", "scopes": ["manage"]}).json()
        assert created["key"].startswith("tw_")
        assert "key" not in api.get(f"/api/v1/keys/{created['prefix']}").json()  # shown once
        with control_plane.client(created["key"]) as short_lived:
            assert short_lived.get("/api/v1/queues/").status_code == 200
            assert api.delete(f"/api/v1/keys/{created['prefix']}").json()["revoked_at"]
            refused = short_lived.get("/api/v1/queues/")
            assert refused.status_code == 401 and "revoked" in refused.json()["message"]


def test_a_key_limited_to_queue_patterns_sees_only_those_queues(control_plane, tenants):
    a = tenants["a"]
    with control_plane.client(a["key"]) as api:
        limited = api.post("/api/v1/keys/", json={"name": "billing-only", "scopes": ["manage"], "queue_patterns": ["billing-*"]}).json()["key"]
    with control_plane.client(limited) as api:
        assert api.post("/api/v1/queues/", json={"name": "billing-events", "replication_factor": 1}).status_code == 201
        refused = api.post("/api/v1/queues/", json={"name": "other", "replication_factor": 1})
        assert refused.status_code == 403
        assert [q["name"] for q in api.get("/api/v1/queues/").json()] == ["billing-events"]
        assert api.get(f"/api/v1/queues/{a['name']}").status_code == 404
