"""A queue's messages: browse (latest, from an offset or a time; filtered on the server) and produce a test message."""

from __future__ import annotations

import csv
import json
import time
from datetime import UTC, datetime
from urllib.parse import urlencode

from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_safe
from tideway_server.gateway.errors import GatewayError
from tideway_server.gateway.operations import browse
from tideway_server.gateway.publishing import OutgoingMessage, publish
from tideway_server.webui import data, searches
from tideway_server.webui.access import member_page
from tideway_server.webui.render import forbidden, page

COUNT_MAX = 500


def _int(value: str | None, default: int, low: int, high: int) -> int:
    try:
        return min(max(int(value), low), high) if value not in (None, "") else default
    except ValueError:
        return default


def _search(request, partitions: int) -> tuple[browse.Search, str]:
    get = request.GET
    search = browse.Search(mode=get.get("mode", "latest") if get.get("mode") in ("latest", "offset", "time") else "latest",
                           count=_int(get.get("count"), 50, 1, COUNT_MAX), key=get.get("key", "")[:200],
                           text=get.get("text", "")[:200], json_path=get.get("json_path", "")[:200],
                           header=get.get("header", "")[:200])
    if get.get("partition", "") != "":
        search.partition = _int(get.get("partition"), 0, 0, partitions - 1)
    search.offset = _int(get.get("offset"), 0, 0, 2**63 - 1)
    problem = ""
    if search.mode == "time":
        try:
            moment = datetime.fromisoformat(get.get("time", "")).replace(tzinfo=UTC)
            search.timestamp_ms = int(moment.timestamp() * 1000)
        except ValueError:
            problem, search.mode = "give a time (UTC) to search from", "latest"
    return search, problem


@require_safe
@member_page(scope="consume")
def messages(request, name: str):
    info = data.queue_info(request.principal, name)
    search, problem = _search(request, info.partitions)
    if not problem and request.headers.get("HX-Request") == "true" and search.filtered and data.in_server_loop():
        # A filtered search may scan up to the budget: run it as a job and show its progress if it takes a while.
        job_id = data.run(searches.start, data.caller_for(request.principal), info, search, _owner(request))
        if job_id is not None:
            return _search_job(request, info, job_id, searches.FIRST_WAIT_S)
    found, error = _find(request, info, search) if not problem else (None, problem)
    return _rows(request, info, search, found, error)


def _find(request, info, search):
    """(what the search found, or None; why not, or None)."""
    try:
        return data.run(browse.find, data.caller_for(request.principal), info, search), None
    except GatewayError as exc:
        return None, data.refusal(exc)
    except Exception as exc:  # noqa: BLE001 - the brokers did not answer: say so on the page
        return None, f"the brokers did not answer: {exc}"


def _owner(request) -> tuple[int, int]:
    return request.user.pk, request.principal.tenant.pk


def detail(message: dict) -> str:
    """A message as its detail pane shows it (and downloads it): indented JSON, with a value that is JSON as JSON
    (the decoded form for a schema's wire format), otherwise as text or hex."""
    value, encoding = message.get("value"), "hex" if message.get("value_hex") else "text"
    if message.get("decoded"):
        value, encoding = message["decoded"], message.get("decoded_as") or "decoded"
    if isinstance(value, str) and encoding != "hex":
        try:
            value, encoding = json.loads(value), "json"
        except ValueError:
            pass
    document = {"partition": message.get("partition"), "offset": message.get("offset"),
                "timestamp": datetime.fromtimestamp(message["timestamp"] / 1000, UTC).isoformat(timespec="milliseconds")
                if isinstance(message.get("timestamp"), int) else None,
                "key": message.get("key"), "headers": message.get("headers") or {}, "value": value, "value_as": encoding}
    return json.dumps(document, indent=2, ensure_ascii=False)


def _rows(request, info, search, found, error, query: str | None = None, *, produce: dict | None = None,
          status: int = 200):
    for message in found.messages if found is not None else ():
        message["detail"] = detail(message)
    return page(request, "messages.html", {"queue": info, "search": search, "found": found, "error": error,
                                           "published": request.GET.get("published", ""),
                                           "produce": produce or {"delay_seconds": "0"},
                                           "may_produce": request.principal.has_scope("produce"),
                                           "may_export": request.principal.tenant.message_export,
                                           "query": request.GET.urlencode() if query is None else query,
                                           "budget": browse.SCAN_BUDGET},
                partial="message_rows.html", status=status)


def _search_job(request, info, job_id: str, wait_s: float):
    """The job's results when it has ended within ``wait_s``, else how far it got (the page asks again)."""
    job = searches.owned(job_id, _owner(request), info.name)
    if job is None:
        return page(request, "messages.html", {"queue": info, "error": "this search is over; search again",
                                               "search": browse.Search()}, partial="message_rows.html", status=404)
    # A wait of 0 (TIDEWAY_CONSOLE_SEARCH_WAIT_S=0) shows the progress step first, however quick the search.
    job = data.run(searches.wait, job_id, wait_s) if wait_s > 0 else job
    query = request.GET.urlencode()
    if wait_s > 0 and job.done.is_set():
        error = ""
        if isinstance(job.error, GatewayError):
            error = data.refusal(job.error)
        elif job.error is not None:
            error = f"the brokers did not answer: {job.error}"
        return _rows(request, info, job.search, job.found, error, query=query)
    return page(request, "messages.html", {"queue": info, "job_id": job_id, "scanned": job.scanned, "query": query,
                                           "budget": browse.SCAN_BUDGET}, partial="search_progress.html")


@require_safe
@member_page(scope="consume")
def search_job(request, name: str, job_id: str):
    """A running search's progress, or its results once it has ended (the page polls this)."""
    info = data.queue_info(request.principal, name)
    return _search_job(request, info, job_id, 0.25)


@require_safe
@member_page(scope="consume")
def export(request, name: str):
    """The messages the browser shows for these search parameters, as JSON or CSV (unless the tenant turned it off)."""
    from tideway_server.tenants import audit

    tenant = request.principal.tenant
    if not tenant.message_export:
        return forbidden(request, "An owner or admin of this tenant turned message export off (Settings).")
    info = data.queue_info(request.principal, name)
    search, problem = _search(request, info.partitions)
    if problem:
        return HttpResponse(problem, status=400, content_type="text/plain")
    found = data.run(browse.find, data.caller_for(request.principal), info, search)
    audit.record(tenant, request.principal.actor, "messages.export", name, count=len(found.messages),
                 format=request.GET.get("format", "json"))
    if request.GET.get("format") == "csv":
        response = HttpResponse(content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{name}-messages.csv"'
        writer = csv.writer(response)
        writer.writerow(["partition", "offset", "timestamp_ms", "key", "value", "headers", "hex"])
        for m in found.messages:
            writer.writerow([m["partition"], m["offset"], m["timestamp"], m["key"], m["value"], json.dumps(m["headers"]),
                             "key" * m["key_hex"] + " value" * m["value_hex"]])
        return response
    response = HttpResponse(json.dumps({"queue": name, "messages": found.messages}, indent=1),
                            content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="{name}-messages.json"'
    return response


def _headers(text: str) -> tuple[dict[str, str], str | None]:
    """The "name: value" lines of the produce form as headers, or why they are not (blank lines are skipped)."""
    headers = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        header, sep, value = line.partition(":")
        if not sep or not header.strip():
            return {}, f"Header line {number} ({line.strip()[:40]!r}) is not \"name: value\"."
        headers[header.strip()] = value.strip()
    return headers, None


@member_page(scope="produce")
def produce(request, name: str):
    if request.method != "POST":
        return redirect(f"/console/queues/{name}/messages")
    info = data.queue_info(request.principal, name)
    post = request.POST
    typed = {field: post.get(field, "") for field in ("key", "value", "headers", "delay_seconds")}
    headers, problem = _headers(typed["headers"])
    if problem is None:
        delay_s = _int(post.get("delay_seconds"), 0, 0, 366 * 24 * 3600)
        message = OutgoingMessage(value=typed["value"], key=typed["key"] or None, headers=headers,
                                  deliver_at=int(time.time() * 1000) + delay_s * 1000 if delay_s else None)
        try:
            (placed,) = data.run(publish, data.caller_for(request.principal), info, [message])
        except GatewayError as exc:
            problem = f"Not published: {data.refusal(exc)}"
    if problem is not None:  # the page again, with what was typed and why it was not published
        search, _ = _search(request, info.partitions)
        found, error = _find(request, info, search)
        return _rows(request, info, search, found, error, produce={**typed, "error": problem}, status=400)
    where = f"partition {placed['partition']}, offset {placed['offset']}"
    return redirect(f"/console/queues/{name}/messages?" + urlencode(
        {"mode": "offset", "partition": placed["partition"], "offset": placed["offset"], "published": where}))
