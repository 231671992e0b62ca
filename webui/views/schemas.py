"""Schemas of the tenant's registry: subjects, versions, a diff of two versions, the compatibility level,
and a check of a new version before registering it — the registry's own actions."""

from __future__ import annotations

import difflib
import json
import re

from django.db.models import Count, Max
from django.http import Http404
from django.shortcuts import redirect
from tideway_server.controlplane.errors import ActionError
from tideway_server.webui.access import member_page
from tideway_server.webui.render import forbidden, page, sentence

TYPES = ("AVRO", "JSON", "PROTOBUF")
SUBJECT = re.compile(r"[A-Za-z0-9._:-]{1,255}")  # the console's route for a subject takes these


def _pretty(text: str) -> list[str]:
    try:
        return json.dumps(json.loads(text), indent=2, sort_keys=True).splitlines()
    except ValueError:
        return text.splitlines()


@member_page()
def subjects(request):
    """The subjects, and a form to register a first version of a new one (a new tenant's first schema)."""
    from tideway_server.registry.actions import do_register, level_for
    from tideway_server.registry.models import SubjectVersion
    from tideway_server.topics.models import Queue

    tenant = request.principal.tenant
    form, errors = {"schema_type": "AVRO"}, {}
    if request.method == "POST":
        if not request.principal.has_scope("manage"):
            return forbidden(request, "Your role may not register schemas: it needs the 'manage' scope.")
        form = {key: request.POST.get(key, "") for key in ("subject", "schema_type", "schema")}
        subject_name = form["subject"].strip()
        if not SUBJECT.fullmatch(subject_name):
            errors["subject"] = ["A subject is 1 to 255 letters, digits, '.', '_', ':' and '-' (a queue's values: "
                                 "QUEUE-value, its keys: QUEUE-key)."]
        elif SubjectVersion.objects.filter(tenant=tenant, subject=subject_name, deleted=False).exists():
            errors["subject"] = [f"{subject_name} exists: add a version on its page."]
        else:
            try:
                do_register(tenant, subject_name, text=form["schema"], schema_type=form["schema_type"],
                            acting=request.principal.actor)
            except ActionError as exc:
                errors["schema"] = [sentence(exc.message)]
            else:
                return redirect(f"/console/schemas/{subject_name}")
    rows = (SubjectVersion.objects.filter(tenant=tenant, deleted=False).values("subject")
            .annotate(versions=Count("id"), latest=Max("version")).order_by("subject"))
    table = [{**row, "level": level_for(tenant, row["subject"])} for row in rows]
    queues = Queue.objects.filter(tenant=tenant).order_by("name").values_list("name", flat=True)[:200]
    return page(request, "schemas.html", {"subjects": table, "types": TYPES, "form": form, "errors": errors,
                                          "suggestions": [f"{q}-value" for q in queues]},
                status=400 if errors else 200)


@member_page()
def subject(request, subject: str):
    from tideway_server.registry import compatibility
    from tideway_server.registry.actions import (
        do_register,
        do_set_level,
        incompatibilities,
        level_for,
        live_versions,
        parse_or_raise,
    )

    tenant = request.principal.tenant
    versions = list(live_versions(tenant, subject))
    if not versions and request.method == "GET":
        raise Http404(f"subject {subject!r} does not exist")
    check = {}
    if request.method == "POST":
        if not request.principal.has_scope("manage"):
            return forbidden(request, "Your role may not change schemas: it needs the 'manage' scope.")
        try:
            if request.POST.get("action") == "level":
                do_set_level(tenant, subject, request.POST.get("level", ""), acting=request.principal.actor)
                check = {"ok": f"compatibility level set to {request.POST.get('level')}"}
            else:
                schema_type, text = request.POST.get("schema_type", "AVRO"), request.POST.get("schema", "")
                parsed = parse_or_raise(schema_type, text)
                level = level_for(tenant, subject)
                problems = incompatibilities(tenant, subject, schema_type, parsed, versions, level)
                check = {"problems": problems, "level": level, "text": text, "schema_type": schema_type}
                if not problems and request.POST.get("action") == "register":
                    registered = do_register(tenant, subject, text=text, schema_type=schema_type, acting=request.principal.actor)
                    check["ok"] = f"registered as version {registered.version}"
                    versions = list(live_versions(tenant, subject))
                elif not problems:
                    check["ok"] = f"compatible ({level}): it can be registered"
        except ActionError as exc:
            check = {"error": exc.message, "text": request.POST.get("schema", "")}
    by_number = {v.version: v for v in versions}
    numbers = sorted(by_number)
    a = _number(request.GET.get("a"), numbers[-2] if len(numbers) > 1 else (numbers[0] if numbers else 0))
    b = _number(request.GET.get("b"), numbers[-1] if numbers else 0)
    shown = by_number.get(_number(request.GET.get("v"), numbers[-1] if numbers else 0))
    diff = []
    if a in by_number and b in by_number:
        diff = list(difflib.unified_diff(_pretty(by_number[a].schema.text), _pretty(by_number[b].schema.text),
                                         f"version {a}", f"version {b}", lineterm=""))
    return page(request, "schema.html", {"subject": subject, "versions": versions, "a": a, "b": b, "diff": diff,
                                         "level": level_for(tenant, subject), "levels": compatibility.LEVELS,
                                         "types": TYPES, "check": check, "shown": shown,
                                         "shown_text": "\n".join(_pretty(shown.schema.text)) if shown else "",
                                         "may_manage": request.principal.has_scope("manage")},
                status=400 if check.get("error") else 200)




def _number(value: str | None, default: int) -> int:
    try:
        return int(value) if value else default
    except ValueError:
        return default
