"""Members (invite, change role, remove: owners and admins) and the audit log (filter, export as CSV)."""

from __future__ import annotations

import csv
import json

from django.core.paginator import Paginator
from django.http import HttpResponse
from django.views.decorators.http import require_safe
from tideway_server.controlplane.errors import ActionError
from tideway_server.webui.access import may_manage_members, member_page
from tideway_server.webui.render import confirmation, confirmed, field_errors, page

ROLES = ("owner", "admin", "developer", "viewer")
AUDIT_PAGE = 100
EXPORT_MAX = 10_000


@member_page(managers_only=True)
def members(request):
    """Members and their roles; invitations by e-mail (nobody is added without accepting, and the page never says
    whether an address or a user name belongs to someone); role changes; removal after a typed confirmation."""
    from tideway_server.tenants.actions import do_change_role, do_remove_member
    from tideway_server.tenants.invitations import (
        PENDING_MAX,
        do_cancel_invitation,
        do_invite,
        pending_invitations,
    )
    from tideway_server.tenants.models import Invitation, Membership

    tenant = request.principal.tenant
    error = notice = ""
    invited, errors, form = None, {}, {}
    if request.method == "POST":
        action = request.POST.get("action", "")
        username = request.POST.get("username", "").strip()
        role = request.POST.get("role", "")
        try:
            if role and role not in ROLES:
                raise ActionError("invalid_request", f"role must be one of {', '.join(ROLES)}")
            if action == "invite":
                form = {"email": request.POST.get("email", "").strip(), "role": role or "developer"}
                try:
                    row, link = do_invite(tenant, email=form["email"], role=form["role"], acting=request.principal.actor,
                                          site=request.build_absolute_uri("/"))
                except ActionError as exc:
                    errors = field_errors(exc)
                else:
                    invited, form = {"email": row.email, "role": row.role, "link": link}, {}
            elif action == "cancel":
                chosen = request.POST.get("invitation", "")
                row = Invitation.objects.filter(tenant=tenant, pk=int(chosen)).first() if chosen.isdigit() else None
                if row is not None:
                    do_cancel_invitation(row, acting=request.principal.actor)
                    notice = f"The invitation to {row.email} was cancelled: its link no longer works."
            else:
                membership = Membership.objects.filter(tenant=tenant, user__username=username).select_related("user", "tenant").first()
                if membership is None:
                    raise ActionError("not_found", f"{username!r} is not a member of this tenant")
                if action == "role":
                    do_change_role(membership, role, acting=request.principal.actor)
                    notice = f"{username} is now {role}"
                elif action == "remove":
                    if not confirmed(request, username):
                        return confirmation(
                            request, title=f"Remove {username} from {tenant.name}",
                            consequence=f"{username} loses the console and the API for this tenant at once; their "
                                        "API keys stay (revoke them on the keys page if they should stop too).",
                            undo="To undo, invite them again (with the role they had).", word=username,
                            word_label="their user name", button="Remove", cancel="/console/members",
                            hidden=(("action", "remove"), ("username", username)),
                            error="" if "confirm" not in request.POST else f"type {username} to remove them")
                    do_remove_member(membership, acting=request.principal.actor)
                    notice = f"{username} was removed"
                else:
                    raise ActionError("invalid_request", "unknown action")
        except ActionError as exc:
            error = exc.message
    rows = Membership.objects.filter(tenant=tenant).select_related("user").order_by("user__username")
    pending = pending_invitations(tenant)[:PENDING_MAX]
    return page(request, "members.html", {"members": rows, "roles": ROLES, "error": error, "notice": notice,
                                          "invited": invited, "errors": errors, "form": form, "invitations": pending,
                                          "may_change": may_manage_members(request.principal)},
                status=400 if error or errors else 200)


@member_page(managers_only=True)
def settings(request):
    """Tenant settings the console owns: whether members may export messages."""
    from tideway_server.tenants.actions import do_set_message_export

    tenant = request.principal.tenant
    saved = False
    if request.method == "POST":
        do_set_message_export(tenant, "message_export" in request.POST, acting=request.principal.actor)
        saved = True
    return page(request, "settings.html", {"tenant": tenant, "saved": saved,
                                           "may_change": may_manage_members(request.principal)})


def _audit_rows(request):
    from tideway_server.tenants.models import AuditEntry

    rows = AuditEntry.objects.filter(tenant=request.principal.tenant).order_by("-created", "-id")
    action = request.GET.get("action", "").strip()
    actor = request.GET.get("actor", "").strip()
    if action:
        rows = rows.filter(action__icontains=action)
    if actor:
        rows = rows.filter(actor__icontains=actor)
    return rows, action, actor


@require_safe
@member_page()
def audit(request):
    rows, action, actor = _audit_rows(request)
    listed = Paginator(rows, AUDIT_PAGE).get_page(request.GET.get("page", "1"))
    return page(request, "audit.html", {"page": listed, "action": action, "actor": actor}, partial="audit_rows.html")


@require_safe
@member_page()
def audit_export(request):
    """The filtered audit log as CSV (newest first, at most EXPORT_MAX rows)."""
    rows, _action, _actor = _audit_rows(request)
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="audit-{request.principal.tenant.slug}.csv"'
    writer = csv.writer(response)
    writer.writerow(["time", "actor", "action", "target", "details"])
    for row in rows[:EXPORT_MAX]:
        writer.writerow([row.created.isoformat(timespec="seconds"), row.actor, row.action, row.target,
                         json.dumps(row.details, sort_keys=True)])
    return response
