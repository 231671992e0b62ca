"""Sign-up, members and their roles, and what operators (staff users) may do."""

from __future__ import annotations

import httpx
import yaml


def _as_user(control_plane, username: str, password: str, tenant: str | None = None) -> httpx.Client:
    headers = {"X-Tideway-Tenant": tenant} if tenant else {}
    return httpx.Client(base_url=control_plane.base_url, auth=(username, password), headers=headers, timeout=60)


def test_signup_members_and_roles(control_plane):
    owner = control_plane.unique("owner")
    with control_plane.client() as anonymous:
        # Step one answers the same for any address (here, outside production, with the link's token).
        asked = anonymous.post("/api/v1/signup", json={"email": f"{owner}@example.com"})
        assert asked.status_code == 202, asked.text
        assert set(asked.json()) == {"detail", "link", "token"} and asked.json()["link"].endswith(asked.json()["token"])
        assert anonymous.post("/api/v1/signup", json={"username": owner, "password": "owner-password",
                                                      "tenant_name": "X"}).status_code == 400  # no e-mail: no account
        forged = anonymous.post("/api/v1/signup/finish", json={"token": asked.json()["token"] + "x", "username": owner,
                                                               "password": "owner-password", "tenant_name": "X"})
        assert forged.status_code == 404 and forged.json()["code"] == "not_found"
        signed_up = anonymous.post("/api/v1/signup/finish", json={
            "token": asked.json()["token"], "username": owner, "password": "owner-password",
            "tenant_name": control_plane.unique("Acme")})
        assert signed_up.status_code == 201, signed_up.text
        assert signed_up.json()["plan"]["name"] == "free"
        again = anonymous.post("/api/v1/signup/finish", json={"token": asked.json()["token"], "username": owner + "2",
                                                              "password": "owner-password", "tenant_name": "Y"})
        assert again.status_code == 404  # a link makes one account
        # Whether a user name is taken is told only to the holder of a fresh link (as in the console).
        other = anonymous.post("/api/v1/signup", json={"email": f"other-{owner}@example.com"}).json()["token"]
        taken = anonymous.post("/api/v1/signup/finish", json={"token": other, "username": owner,
                                                              "password": "another-password", "tenant_name": "X"})
        assert taken.status_code == 409 and taken.json()["code"] == "username_taken"
    viewer, developer = control_plane.unique("viewer"), control_plane.unique("developer")
    with _as_user(control_plane, owner, "owner-password") as api:
        for name, role in ((viewer, "viewer"), (developer, "developer")):
            assert control_plane.add_member(api, name, role, "member-password").status_code == 201
        assert sorted(m["role"] for m in api.get("/api/v1/members/").json()) == ["developer", "owner", "viewer"]
        last_owner = api.patch(f"/api/v1/members/{owner}", json={"role": "admin"})
        assert last_owner.status_code == 409 and last_owner.json()["code"] == "last_owner"
    with _as_user(control_plane, viewer, "member-password") as api:
        assert api.get("/api/v1/queues/").status_code == 200
        refused = api.post("/api/v1/queues/", json={"name": "nope", "replication_factor": 1})
        assert refused.status_code == 403 and refused.json()["code"] == "forbidden"
    with _as_user(control_plane, developer, "member-password") as api:
        assert api.post("/api/v1/queues/", json={"name": "dev-queue", "replication_factor": 1}).status_code == 201
        refused = api.post("/api/v1/invitations/", json={"email": "x@example.com", "role": "viewer"})
        assert refused.status_code == 403  # only owners and admins change members
    with _as_user(control_plane, owner, "wrong-password") as api:
        assert api.get("/api/v1/queues/").status_code == 401


def test_operators_manage_tenants_plans_and_clusters(control_plane):
    username, password = control_plane.create_operator()
    slug, key = control_plane.create_tenant()
    with control_plane.client(key) as tenant_api:
        assert tenant_api.get("/api/v1/operator/tenants/").status_code == 403
    with _as_user(control_plane, username, password) as api:
        assert slug in [t["slug"] for t in api.get("/api/v1/operator/tenants/").json()]
        assert api.patch(f"/api/v1/operator/tenants/{slug}", json={"plan": "business"}).json()["plan"] == "business"
        registered = api.post("/api/v1/operator/clusters/", json={"name": "eu-west-1", "region": "eu", "provisioner": "kubernetes",
                                                                  "spec": {"brokers": 3, "storage_gib": 500}})
        assert registered.status_code == 201, registered.text
        manifests = list(yaml.safe_load_all(api.get("/api/v1/operator/clusters/eu-west-1/manifests").text))
        assert {d["kind"] for d in manifests} == {"ConfigMap", "Service", "StatefulSet", "Deployment", "PodDisruptionBudget",
                                                  "NetworkPolicy"}
        bad = api.post("/api/v1/operator/clusters/", json={"name": "bad", "spec": {"brokers": 0}})
        assert bad.status_code == 400 and bad.json()["code"] == "invalid_request"
    with control_plane.client(key) as tenant_api:
        assert tenant_api.get("/api/v1/tenant").json()["tenant"]["plan"]["name"] == "business"
        assert any(e["action"] == "tenant.change_plan" for e in tenant_api.get("/api/v1/audit/").json())
