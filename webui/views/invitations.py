"""An invitation's link: the invitee accepts, signed in or creating their own account here (they choose the user
name and the password), and lands on the tenant's dashboard."""

from __future__ import annotations

from django.contrib.auth import login
from django.shortcuts import redirect
from tideway_server.controlplane.errors import ActionError
from tideway_server.webui.access import SESSION_TENANT
from tideway_server.webui.render import error_page, field_errors, page, sentence


def invitation(request, token: str):
    from tideway_server.tenants.invitations import do_accept, do_sign_up_and_accept, invitation_for

    try:
        row = invitation_for(token)
    except ActionError as exc:
        return error_page(request, 404, sentence(exc.message))
    errors, form = {}, {}
    if request.method == "POST":
        try:
            if request.user.is_authenticated:
                membership = do_accept(row, request.user)
            else:
                form = {"username": request.POST.get("username", "").strip()}
                membership = do_sign_up_and_accept(row, username=form["username"],
                                                   password=request.POST.get("password", ""))
                login(request, membership.user, backend="django.contrib.auth.backends.ModelBackend")
        except ActionError as exc:
            if exc.code == "not_found":
                return error_page(request, 404, sentence(exc.message))
            errors = field_errors(exc)
        else:
            request.session[SESSION_TENANT] = membership.tenant.slug
            return redirect("/console/")
    return page(request, "invitation.html", {"invitation": row, "errors": errors, "form": form,
                                             "signin": f"/console/signin?next={request.path}"},
                status=400 if errors else 200)
