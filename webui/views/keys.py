"""API keys: list (scopes, queue patterns, last used), create (the key shown once), rotate, revoke, and AWS
credentials for the SQS endpoint (the secret shown once) — the API's actions."""

from __future__ import annotations

from datetime import timedelta

from django.http import Http404
from django.shortcuts import redirect
from django.utils import timezone
from tideway_server.controlplane.errors import ActionError
from tideway_server.webui.access import may_manage_members, member_page
from tideway_server.webui.render import confirmation, confirmed, field_errors, page

SCOPES = ("produce", "consume", "manage")
EXPIRIES = ((0, "never (until revoked)"), (7, "in 7 days"), (30, "in 30 days"), (90, "in 90 days"), (365, "in a year"))
GRACES = ((3600, "an hour"), (86400, "a day"), (7 * 86400, "7 days"), (0, "no time: it stops now"))


def _key_states(rows) -> list:
    """Each key with its state in words (``ApiKey.state``: active, expired, revoked)."""
    now = timezone.now()
    for row in rows:
        row.shown_state = row.state(now)
    return rows


@member_page(scope="manage", managers_only=True)
def keys(request):
    from tideway_server.tenants.actions import do_create_api_key
    from tideway_server.tenants.aws_credentials import access_key_id
    from tideway_server.tenants.models import ApiKey

    tenant = request.principal.tenant
    created, errors, form = request.session.pop("rotated_key", None), {}, {}
    aws = request.session.pop("aws_credentials", None)
    if request.method == "POST":
        form = {"name": request.POST.get("name", "").strip()[:100], "scopes": request.POST.getlist("scopes"),
                "queue_patterns": request.POST.get("queue_patterns", ""), "expires": request.POST.get("expires", "0")}
        scopes = [s for s in SCOPES if s in form["scopes"]]
        patterns = [p.strip() for p in form["queue_patterns"].split(",") if p.strip()] or ["*"]
        days = int(form["expires"]) if form["expires"].isdigit() else 0
        if not form["name"]:
            errors["name"] = ["Give the key a name (what uses it, say)."]
        if not scopes:
            errors["scopes"] = ["Tick at least one scope: produce, consume or manage."]
        if not errors:
            try:
                row, secret = do_create_api_key(tenant, name=form["name"], scopes=scopes, queue_patterns=patterns,
                                                expires_at=timezone.now() + timedelta(days=days) if days else None,
                                                acting=request.principal.actor)
            except ActionError as exc:
                errors = field_errors(exc)
            else:
                created, form = {"name": row.name, "key": secret}, {}
    rows = _key_states(ApiKey.objects.filter(tenant=tenant).order_by("-created"))
    for row in rows:
        row.aws_access_key_id = access_key_id(row.prefix) if row.aws_credentials_salt else ""
    return page(request, "keys.html", {"keys": rows, "created": created, "errors": errors, "form": form, "aws": aws,
                                       "scopes": SCOPES, "expiries": EXPIRIES,
                                       "may_change": may_manage_members(request.principal)},
                status=400 if errors else 200)


@member_page(scope="manage", managers_only=True)
def rotate(request, prefix: str):
    """A new key in place of this one: the same name, scopes and queues; the old one works a while longer."""
    from tideway_server.tenants.actions import do_rotate_api_key
    from tideway_server.tenants.models import ApiKey

    row = ApiKey.objects.filter(tenant=request.principal.tenant, prefix=prefix).select_related("tenant").first()
    if row is None:
        raise Http404(f"API key {prefix!r} does not exist")
    error = ""
    if request.method == "POST":
        grace = request.POST.get("grace_s", "")
        try:
            new_row, secret = do_rotate_api_key(row, grace_s=int(grace) if grace.isdigit() else -1,
                                                acting=request.principal.actor)
        except ActionError as exc:
            error = exc.message
        else:
            request.session["rotated_key"] = {"name": new_row.name, "key": secret, "replaces": row.prefix,
                                              "old_stops": row.expires_at.isoformat() if row.expires_at else None}
            return redirect("/console/keys")
    return page(request, "key_rotate.html", {"key": row, "graces": GRACES, "error": error}, status=400 if error else 200)


@member_page(scope="manage", managers_only=True)
def revoke(request, prefix: str):
    from tideway_server.tenants.actions import do_revoke_api_key
    from tideway_server.tenants.models import ApiKey

    row = ApiKey.objects.filter(tenant=request.principal.tenant, prefix=prefix).select_related("tenant").first()
    if row is None:
        raise Http404(f"API key {prefix!r} does not exist")
    if row.revoked_at is not None:
        return redirect("/console/keys")
    if not confirmed(request, row.name):
        return confirmation(
            request, title=f"Revoke the key {row.name}",
            consequence=f"Every client using the key {row.prefix}… stops working within a few seconds: REST calls, "
                        "WebSockets, the native protocol and Kafka clients alike.",
            undo="This cannot be undone: a revoked key never works again (create a new key for those clients).",
            word=row.name, word_label="the key's name", button="Revoke", cancel="/console/keys",
            error="" if request.method != "POST" else f"type the key's name ({row.name}) to revoke it")
    do_revoke_api_key(row, acting=request.principal.actor)
    return redirect("/console/keys")


@member_page(scope="manage", managers_only=True)
def aws_credentials(request, prefix: str):
    """POST: AWS credentials acting as this key on the SQS endpoint (new ones in place of any before); the secret
    is shown once, on the keys page. POST with ``revoke``: the credentials stop working."""
    from django.conf import settings
    from tideway_server.tenants.actions import do_issue_aws_credentials, do_revoke_aws_credentials
    from tideway_server.tenants.models import ApiKey

    row = ApiKey.objects.filter(tenant=request.principal.tenant, prefix=prefix).select_related("tenant").first()
    if row is None:
        raise Http404(f"API key {prefix!r} does not exist")
    if request.method != "POST":
        return redirect("/console/keys")
    if request.POST.get("revoke"):
        do_revoke_aws_credentials(row, acting=request.principal.actor)
        return redirect("/console/keys")
    try:
        access_key, secret = do_issue_aws_credentials(row, acting=request.principal.actor)
    except ActionError as exc:
        request.session["aws_credentials"] = {"error": exc.message}
    else:
        request.session["aws_credentials"] = {"name": row.name, "access_key_id": access_key, "secret": secret,
                                              "region": settings.TIDEWAY_SQS_REGION,
                                              "endpoint": request.build_absolute_uri("/sqs")}
    return redirect("/console/keys")
