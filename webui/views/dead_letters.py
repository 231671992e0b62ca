"""A queue's dead letters: where each came from and why; redrive (all or selected, at a rate) or purge."""

from __future__ import annotations

from urllib.parse import urlencode

from django.shortcuts import redirect
from django.views.decorators.http import require_safe
from tideway_server.gateway import operations
from tideway_server.gateway.errors import GatewayError
from tideway_server.webui import data
from tideway_server.webui.access import member_page
from tideway_server.webui.render import confirmation, confirmed, page

LIST_MAX = 500


@require_safe
@member_page(scope="consume")
def dead_letters(request, name: str):
    info = data.queue_info(request.principal, name)
    letters, error = [], request.GET.get("error", "")
    try:
        letters = data.run(operations.dead_letters, data.caller_for(request.principal), info, limit=LIST_MAX)
    except GatewayError as exc:
        error = data.refusal(exc)
    except Exception as exc:  # noqa: BLE001 - the brokers did not answer: say so on the page
        error = f"the brokers did not answer: {exc}"
    for letter in letters:
        headers = letter.get("headers", {})
        letter["error"] = headers.get("tideway-dlq-last-error", "")
        letter["deliveries"] = headers.get("tideway-dlq-delivery-count", "")
        letter["origin"] = (f"{headers.get('tideway-dlq-origin-topic', name)} partition "
                            f"{headers.get('tideway-dlq-origin-partition', '?')}, offset {headers.get('tideway-dlq-origin-offset', '?')}")
        letter["group"] = headers.get("tideway-dlq-group", "")
        # When it died: its last delivery (the record's own timestamp is when it was published).
        last = headers.get("tideway-dlq-last-delivery-ms", "")
        letter["dead_since"] = int(last) if last.isdigit() else None
    return page(request, "dead_letters.html", {"queue": info, "letters": letters, "error": error,
                                               "job": request.GET.get("job", ""), "notice": request.GET.get("notice", ""),
                                               "may_manage": request.principal.has_scope("manage")})


@member_page(scope="manage")
def redrive(request, name: str):
    if request.method != "POST":
        return redirect(f"/console/queues/{name}/dead-letters")
    info = data.queue_info(request.principal, name)
    which = request.POST.get("which", "all")
    if which.startswith("dry-run"):
        return _dry_run(request, info, which == "dry-run-selected")
    selected = None
    if which == "selected":
        selected = []
        for item in request.POST.getlist("letter"):
            partition, _, offset = item.partition(":")
            if partition.isdigit() and offset.isdigit():
                selected.append((int(partition), int(offset)))
        if not selected:
            return redirect(f"/console/queues/{name}/dead-letters?" + urlencode({"error": "select dead letters first"}))
    if which == "all" and not confirmed(request, info.name):
        rate = request.POST.get("rate_per_s", "100") or "100"
        return confirmation(
            request, title=f"Redrive every dead letter of {info.name}",
            consequence=f"Every dead letter of {info.name} (not only those on the page) goes back to the queue it came "
                        f"from, at {rate} per second, and is delivered to its group again. Run a dry run to count them.",
            undo="This cannot be undone: once delivered again, a message is processed again.",
            word=info.name, word_label="the queue's name", button="Redrive all",
            cancel=f"/console/queues/{info.name}/dead-letters", hidden=(("which", "all"), ("rate_per_s", rate)),
            error="" if "confirm" not in request.POST else f"type the queue's name ({info.name}) to redrive everything")
    try:
        rate = float(request.POST.get("rate_per_s", "100") or 100)
        job = data.run(operations.start_redrive, data.caller_for(request.principal), info, rate_per_s=rate, limit=None,
                       selected=selected)
    except (GatewayError, ValueError) as exc:
        message = data.refusal(exc) if isinstance(exc, GatewayError) else "the rate must be a number"
        return redirect(f"/console/queues/{name}/dead-letters?" + urlencode({"error": message}))
    return redirect(f"/console/queues/{name}/dead-letters?" + urlencode({"job": job}))


def _dry_run(request, info, only_selected: bool):
    """What a redrive would move, without moving anything: how many letters, back to which queue."""
    chosen = {item for item in request.POST.getlist("letter")} if only_selected else None
    if chosen is not None and not chosen:  # (it said "would move 0": issue 43)
        return redirect(f"/console/queues/{info.name}/dead-letters?" + urlencode(
            {"error": "select dead letters first: tick the ones a dry run should count"}))
    letters = data.run(operations.dead_letters, data.caller_for(request.principal), info, limit=LIST_MAX)
    moving = [letter for letter in letters if chosen is None or f"{letter['partition']}:{letter['offset']}" in chosen]
    origins = sorted({letter.get("headers", {}).get("tideway-dlq-origin-topic", info.name) for letter in moving})
    summary = (f"A redrive would move {len(moving)} dead letter{'s' if len(moving) != 1 else ''} back to "
               f"{', '.join(origins) or info.name}; nothing was moved.")
    return redirect(f"/console/queues/{info.name}/dead-letters?" + urlencode({"notice": summary}))


@require_safe
@member_page(scope="consume")
def redrive_job(request, name: str, job_id: str):
    """The state of a redrive job (HTMX polls it while it runs)."""
    from celery.result import AsyncResult

    info = data.queue_info(request.principal, name)
    exists = data.run(operations.redrive_job_exists, info.id, job_id)
    result = AsyncResult(job_id) if exists else None
    moved = result.result.get("moved") if result is not None and result.successful() else None
    answer = page(request, "dead_letters.html", {"queue": info, "job": job_id, "result": result, "moved": moved},
                  partial="redrive_job.html")
    if moved is not None and request.headers.get("HX-Request") == "true":
        # Done: the page again, so that the table no longer shows the letters moved back (it stayed stale).
        answer["HX-Redirect"] = f"/console/queues/{name}/dead-letters?" + urlencode(
            {"notice": f"Redrive {job_id}: done, {moved} moved back to the queue."})
    return answer


@member_page(scope="manage")
def purge(request, name: str):
    if request.method != "POST":
        return redirect(f"/console/queues/{name}/dead-letters")
    info = data.queue_info(request.principal, name)
    if request.POST.get("confirm", "") != name:
        return redirect(f"/console/queues/{name}/dead-letters?" + urlencode({"error": f"type {name} to purge"}))
    try:
        data.run(operations.purge, data.caller_for(request.principal), info)
    except GatewayError as exc:
        return redirect(f"/console/queues/{name}/dead-letters?" + urlencode({"error": data.refusal(exc)}))
    return redirect(f"/console/queues/{name}/dead-letters")
