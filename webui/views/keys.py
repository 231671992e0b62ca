"""API keys: list (scopes, queue patterns, last used), create (the key shown once), revoke — the API's actions."""

from __future__ import annotations

from django.http import Http404
from django.shortcuts import redirect
from tideway_server.controlplane.errors import ActionError
from tideway_server.webui.access import may_manage_members, member_page
from tideway_server.webui.render import confirmation, confirmed, page

SCOPES = ("produce", "consume", "manage")


@member_page(scope="manage", managers_only=True)
def keys(request):
    from tideway_server.tenants.actions import do_create_api_key
    from tideway_server.tenants.models import ApiKey

    tenant = request.principal.tenant
    created, error = None, ""
    if request.method == "POST":
        name = request.POST.get("name", "").strip()[:100]
        scopes = [s for s in SCOPES if s in request.POST.getlist("scopes")]
        patterns = [p.strip() for p in request.POST.get("queue_patterns", "").split(",") if p.strip()] or ["*"]
        if not name:
            error = "give the key a name"
        else:
            try:
                row, secret = do_create_api_key(tenant, name=name, scopes=scopes, queue_patterns=patterns,
                                                acting=request.principal.actor)
            except ActionError as exc:
                error = exc.message
            else:
                created = {"name": row.name, "key": secret}
    rows = ApiKey.objects.filter(tenant=tenant).order_by("-created")
    return page(request, "keys.html", {"keys": rows, "created": created, "error": error, "scopes": SCOPES,
                                       "may_change": may_manage_members(request.principal)},
                status=400 if error else 200)


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
