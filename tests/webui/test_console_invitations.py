"""Members by invitation (issue 43): an owner invites an e-mail address; the invitee joins through the signed link,
signed in or signing up there; nobody joins or gets a password without acting themselves, and the members page
answers an invitation the same whether or not the address or a user name exists."""

from __future__ import annotations

import pytest
from django.core import mail
from django.test import Client

from tests.harness.console import PASSWORD, signed_in

pytestmark = pytest.mark.django_db


def _invite(client, email: str, role: str = "developer") -> str:
    answer = client.post("/console/members", {"action": "invite", "email": email, "role": role})
    assert answer.status_code == 200, answer.content[:300]
    page = answer.content.decode()
    link = page.split('id="invite-link" readonly value="')[1].split('"')[0]
    assert link.startswith("http://testserver/console/invitations/")
    return link.removeprefix("http://testserver")


def test_an_invitee_signs_up_through_the_link_and_lands_in_the_tenant(client, owner_a):
    from tideway_server.tenants.models import AuditEntry, Membership

    user, tenant = owner_a
    signed_in(client, user)
    bad = client.post("/console/members", {"action": "invite", "email": "not an address", "role": "viewer"})
    assert bad.status_code == 400 and "is not one (name@example.com)" in bad.content.decode()
    assert 'value="not an address"' in bad.content.decode()
    link = _invite(client, "Newcomer@Example.com", "viewer")
    assert len(mail.outbox) == 1 and mail.outbox[0].to == ["newcomer@example.com"] and link in mail.outbox[0].body
    assert "newcomer@example.com" in client.get("/console/members").content.decode()  # waiting
    assert not Membership.objects.filter(tenant=tenant, role="viewer").exists()  # nobody joined yet

    invitee = Client()
    shown = invitee.get(link)
    assert shown.status_code == 200 and "Join alice inc" in shown.content.decode() and "viewer" in shown.content.decode()
    taken = invitee.post(link, {"username": "alice", "password": "another long password"})
    assert taken.status_code == 400 and "user name is taken" in taken.content.decode()
    weak = invitee.post(link, {"username": "nina", "password": "123"})
    assert weak.status_code == 400 and 'value="nina"' in weak.content.decode()
    joined = invitee.post(link, {"username": "nina", "password": "nina's own long password"})
    assert joined.status_code == 302 and joined["Location"] == "/console/"
    membership = Membership.objects.get(tenant=tenant, user__username="nina")
    assert membership.role == "viewer" and membership.user.email == "newcomer@example.com"
    assert invitee.get("/console/queues").status_code == 200  # signed in, in the tenant
    assert AuditEntry.objects.filter(tenant=tenant, action="member.join", actor="user:nina").exists()
    again = Client().get(link)  # a link works once
    assert again.status_code == 404 and "not valid" in again.content.decode()


def test_an_existing_user_accepts_signed_in_and_forged_or_cancelled_links_do_nothing(client, owner_a, owner_b):
    from tideway_server.tenants.models import Membership

    user, tenant = owner_a
    bob, _ = owner_b
    signed_in(client, user)
    # The answer for a user's address is the answer for anyone's: it never says who has an account.
    known = client.post("/console/members", {"action": "invite", "email": "bob@example.com", "role": "admin"}).content.decode()
    unknown = client.post("/console/members", {"action": "invite", "email": "zed@example.com", "role": "admin"}).content.decode()
    strip = lambda page, email: page.split('role="status"')[1].split("</p>")[0].replace(email, "X")  # noqa: E731
    assert strip(known, "bob@example.com") == strip(unknown, "zed@example.com")
    link = known.split('id="invite-link" readonly value="')[1].split('"')[0].removeprefix("http://testserver")
    assert not Membership.objects.filter(tenant=tenant, user=bob).exists()  # not added without acting

    forged = Client().get(link[:-3] + "abc")
    assert forged.status_code == 404
    bobs = signed_in(Client(), bob)
    assert "Join alice inc" in bobs.get(link).content.decode()
    assert bobs.post(link).status_code == 302
    assert Membership.objects.get(tenant=tenant, user=bob).role == "admin"

    zed_link = unknown.split('id="invite-link" readonly value="')[1].split('"')[0].removeprefix("http://testserver")
    from tideway_server.tenants.models import Invitation

    zed = Invitation.objects.get(email="zed@example.com")
    client.post("/console/members", {"action": "cancel", "invitation": str(zed.pk)})
    assert Client().get(zed_link).status_code == 404


def test_the_members_page_no_longer_adds_users_or_sets_passwords(client, owner_a, owner_b):
    from tideway_server.tenants.models import Membership

    user, tenant = owner_a
    signed_in(client, user)
    page = client.get("/console/members").content.decode()
    assert 'name="password"' not in page and 'name="username" required' not in page
    refused = client.post("/console/members", {"action": "add", "username": "bob", "role": "owner", "password": PASSWORD})
    assert refused.status_code == 400 and not Membership.objects.filter(tenant=tenant, user=owner_b[0]).exists()
    unknown = client.post("/console/members", {"action": "role", "username": "nobody-at-all", "role": "viewer"})
    other_tenants_user = client.post("/console/members", {"action": "role", "username": "bob", "role": "viewer"})
    # a user of another tenant and no user at all get the same sentence
    def sentence(answer, name):
        return answer.content.decode().split('role="alert">')[1].split("<")[0].replace(name, "X")

    assert unknown.status_code == other_tenants_user.status_code == 400
    assert sentence(unknown, "nobody-at-all") == sentence(other_tenants_user, "bob") == "&#x27;X&#x27; is not a member of this tenant"


def test_the_api_invites_and_the_invitee_accepts_acting_themselves(client, owner_a, owner_b):
    from tideway_server.tenants.actions import do_create_api_key
    from tideway_server.tenants.models import Membership

    _user, tenant = owner_a
    _, key = do_create_api_key(tenant, name="admin", scopes=["manage"], acting="test")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {key}"}
    added = client.post("/api/v1/members/", {"username": "bob", "role": "owner", "password": PASSWORD},
                        content_type="application/json", **auth)
    assert added.status_code == 409 and added.json()["code"] == "by_invitation"
    assert not Membership.objects.filter(tenant=tenant, user=owner_b[0]).exists()
    invited = client.post("/api/v1/invitations/", {"email": "bob@example.com", "role": "developer"},
                          content_type="application/json", **auth).json()
    assert invited["link"].endswith(invited["token"]) and [i["email"] for i in client.get("/api/v1/invitations/", **auth).json()] == ["bob@example.com"]
    anonymous = Client()
    wrong = anonymous.post("/api/v1/invitations/accept", {"token": invited["token"], "username": "bob", "password": "nope"},
                           content_type="application/json")
    assert wrong.status_code == 401
    joined = anonymous.post("/api/v1/invitations/accept", {"token": invited["token"], "username": "bob", "password": PASSWORD},
                            content_type="application/json")
    assert joined.status_code == 201 and joined.json()["role"] == "developer"
    assert Membership.objects.get(tenant=tenant, user=owner_b[0]).role == "developer"
    used = anonymous.post("/api/v1/invitations/accept", {"token": invited["token"], "username": "bob", "password": PASSWORD},
                          content_type="application/json")
    assert used.status_code == 404
    second = client.post("/api/v1/invitations/", {"email": "carol@example.com"}, content_type="application/json", **auth).json()
    assert client.delete(f"/api/v1/invitations/{second['id']}", **auth).status_code == 204
    cancelled = anonymous.post("/api/v1/invitations/accept", {"token": second["token"], "username": "carol",
                                                              "password": PASSWORD, "new_account": True},
                               content_type="application/json")
    assert cancelled.status_code == 404
