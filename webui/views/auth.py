"""Sign up, sign in (throttled), sign out, change password, switch tenant."""

from __future__ import annotations

from django import forms
from django.contrib.auth import authenticate, login, logout, update_session_auth_hash
from django.contrib.auth.forms import PasswordChangeForm
from django.http import HttpResponseNotAllowed
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST
from tideway_server.controlplane.errors import ActionError
from tideway_server.webui import throttle
from tideway_server.webui.access import SESSION_TENANT, memberships


class SigninForm(forms.Form):
    username = forms.CharField(label="User name", max_length=150)
    password = forms.CharField(label="Password", widget=forms.PasswordInput)


class SignupForm(forms.Form):
    username = forms.RegexField(label="User name", regex=r"^[A-Za-z0-9_.@+-]{3,150}$",
                                error_messages={"invalid": "3 to 150 letters, digits or _ . @ + -"})
    email = forms.EmailField(label="Email")
    password = forms.CharField(label="Password", widget=forms.PasswordInput, min_length=10,
                               help_text="at least 10 characters")
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
    from tideway_server.tenants.actions import do_signup

    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            user, _tenant = do_signup(**form.cleaned_data)
        except ActionError as exc:
            form.add_error("username" if "user" in exc.code else "tenant_name", exc.message)
        else:
            login(request, user, backend="django.contrib.auth.backends.ModelBackend")
            return redirect("/console/")
    return render(request, "webui/signup.html", {"form": form}, status=400 if form.errors else 200)


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
