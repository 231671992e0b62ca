"""Sign up, sign in (throttled), sign out, change password, switch tenant."""

from __future__ import annotations

import logging

from django import forms
from django.contrib.auth import authenticate, login, logout, update_session_auth_hash
from django.contrib.auth.forms import PasswordChangeForm
from django.http import HttpResponseNotAllowed
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST
from tideway_server.controlplane.errors import ActionError
from tideway_server.tenants.choices import PASSWORD_MIN, USERNAME_PATTERN
from tideway_server.webui import throttle
from tideway_server.webui.access import SESSION_TENANT, memberships
from tideway_server.webui.render import error_page

log = logging.getLogger(__name__)


class SigninForm(forms.Form):
    username = forms.CharField(label="User name", max_length=150)
    password = forms.CharField(label="Password", widget=forms.PasswordInput)


class SignupStartForm(forms.Form):
    email = forms.EmailField(label="Email", help_text="we send a link there to finish creating your account")


class SignupForm(forms.Form):
    username = forms.RegexField(label="User name", regex=f"^{USERNAME_PATTERN}$",
                                error_messages={"invalid": "3 to 150 letters, digits or _ . @ + -"})
    password = forms.CharField(label="Password", widget=forms.PasswordInput, min_length=PASSWORD_MIN,
                               help_text=f"at least {PASSWORD_MIN} characters")
    tenant_name = forms.CharField(label="Organisation", max_length=100,
                                  help_text="your tenant: queues, keys and members belong to it")


def _next(request) -> str:
    target = request.POST.get("next") or request.GET.get("next") or "/console/"
    return target if url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}) else "/console/"


def signin(request):
    form = SigninForm(request.POST or None)
    status = 200
    if request.method == "POST" and form.is_valid():
        username = form.cleaned_data["username"]
        if throttle.locked(request, username):
            form.add_error(None, f"too many failed attempts: wait {throttle.WINDOW_S // 60} minutes")
            status = 429
        else:
            user = authenticate(request, username=username, password=form.cleaned_data["password"])
            if user is None or not user.is_active:
                throttle.failed(request, username)
                form.add_error(None, "the user name or password is not valid")
                status = 400
            else:
                throttle.succeeded(request, username)
                login(request, user)
                return redirect(_next(request))
    return render(request, "webui/signin.html", {"form": form, "next": _next(request)}, status=status)


def signup(request):
    """Step one: an e-mail address, and a link sent there. The answer is the same whatever the address (and no
    user name is asked yet), so sign-up never tells who has an account; in development, where no mail is sent,
    the link is also on the page (settings.SIGNUP_LINK_ON_PAGE)."""
    from django.conf import settings
    from tideway_server.tenants.signup import send_link, token_for

    form = SignupStartForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        email = form.cleaned_data["email"].strip().lower()
        link = request.build_absolute_uri(f"/console/signup/{token_for(email)}")
        send_link(request.META.get("REMOTE_ADDR", ""), email, link)  # the page says the same whatever happened
        return render(request, "webui/signup_sent.html", {
            "email": email, "link": link if settings.SIGNUP_LINK_ON_PAGE else None})
    return render(request, "webui/signup.html", {"form": form}, status=400 if form.errors else 200)


def signup_finish(request, token: str):
    """Step two, from the e-mailed link: the user name, password and organisation; the account and its tenant."""
    from tideway_server.tenants.actions import do_signup
    from tideway_server.tenants.signup import email_for

    email = email_for(token)
    if email is None:
        return error_page(request, 404, "This sign-up link is not valid or has expired (links last a day): sign up again.")
    from django.contrib.auth import get_user_model

    if get_user_model().objects.filter(email__iexact=email).exists():  # (the link has done its work: it is used)
        return render(request, "webui/error.html", {"title": "You have an account", "sentence": f"An account for "
                      f"{email} exists: sign in with it (members of several organisations switch in the header)."})
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            user, _tenant = do_signup(email=email, **form.cleaned_data)
        except ActionError as exc:
            form.add_error("username" if "user" in exc.code else "tenant_name", exc.message)
        else:
            login(request, user, backend="django.contrib.auth.backends.ModelBackend")
            return redirect("/console/")
    return render(request, "webui/signup_finish.html", {"form": form, "email": email}, status=400 if form.errors else 200)


def signout(request):
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    logout(request)
    return redirect("/console/signin")


def password_change(request):
    if not request.user.is_authenticated:
        return redirect(f"/console/signin?next={request.path}")
    form = PasswordChangeForm(request.user, request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        update_session_auth_hash(request, user)
        return render(request, "webui/password.html", {"form": PasswordChangeForm(user), "changed": True})
    return render(request, "webui/password.html", {"form": form}, status=400 if form.errors else 200)


@require_POST
def switch_tenant(request):
    if not request.user.is_authenticated:
        return redirect("/console/signin")
    slug = request.POST.get("tenant", "")
    if request.user.is_staff or any(m.tenant.slug == slug for m in memberships(request.user)):
        request.session[SESSION_TENANT] = slug
    return redirect("/console/")
