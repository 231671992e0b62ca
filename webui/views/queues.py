"""Queues: list (search, sort, pages), create with the API's validation, a queue's settings and partitions, delete.

Creation and deletion go through the control plane's actions with the
member's principal, as the API does: the same quota checks, placement and
audit row. The form is checked by the API's own serializer, so the console
shows the API's messages.
"""

from __future__ import annotations

import logging

from django.core.paginator import Paginator
from django.http import Http404, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.views.decorators.http import require_safe
from tideway_server.controlplane.errors import ActionError
from tideway_server.webui.access import member_page
from tideway_server.webui.render import page

log = logging.getLogger(__name__)

PAGE_SIZE = 50
SORTS = {"name": "name", "-name": "-name", "created": "created", "-created": "-created",
         "partitions": "partitions", "-partitions": "-partitions"}
# The form's fields: every setting the API takes when a queue is created, in its order.
FIELDS = ["name", "mode", "partitions", "replication_factor", "retention_ms", "retention_bytes", "compaction",
          "max_message_bytes", "visibility_timeout_ms", "max_deliveries", "delivery_delay_ms", "fifo",
          "schema_subject", "schema_encoding"]
BOOLEAN_FIELDS = {"compaction", "fifo"}


def _queue(request, name: str):
    from tideway_server.topics.models import Queue

    queue = Queue.objects.filter(tenant=request.principal.tenant, name=name).select_related("cluster").first()
    if queue is None or not request.principal.may_touch(name):
        raise Http404(f"queue {name!r} does not exist")
    return queue


@require_safe
@member_page()
def queue_list(request):
    from tideway_server.topics.models import Queue

    search = request.GET.get("q", "").strip()
    sort = SORTS.get(request.GET.get("sort", "name"), "name")
    rows = Queue.objects.filter(tenant=request.principal.tenant).order_by(sort, "id")
    if search:
        rows = rows.filter(name__icontains=search)
    listed = Paginator(rows.only("name", "mode", "status", "partitions", "replication_factor", "created"), PAGE_SIZE)
    page_number = request.GET.get("page", "1")
    current = listed.get_page(page_number)
    return page(request, "queues.html", {"page": current, "search": search, "sort": sort}, partial="queue_rows.html")


FIGURES_KEEP_S = 300  # a look older than this gives no rate (the next look starts a new measure)


@require_safe
@member_page()
def queue_figures(request):
    """The queue list's figures for the queues named (those of the shown page, in order): messages stored and
    messages in and out per second, as out-of-band pieces of the table (HTMX asks every 5 s). A rate is the
    difference with this member's previous look (kept in the cache), so the first look shows none yet."""
    from django.core.cache import cache
    from tideway_server.gateway.operations.traffic import queue_list_figures, topics_by_cluster
    from tideway_server.topics.models import Queue
    from tideway_server.webui import data

    names = [n for n in request.GET.get("names", "").split(",") if n][:PAGE_SIZE]
    rows = {q.name: q for q in Queue.objects.filter(tenant=request.principal.tenant, name__in=names).select_related("cluster")
            if request.principal.may_touch(q.name)}
    by_cluster = topics_by_cluster(rows.values())
    looked: dict = {}
    for bootstrap, partitions in by_cluster.items():
        try:
            looked.update(data.run(queue_list_figures, bootstrap, partitions))
        except Exception as exc:  # noqa: BLE001 - a cluster that does not answer: its queues show a dash
            log.info("queue list figures: %s did not answer: %r", bootstrap, exc)
    figures = []
    for index, name in enumerate(names, start=1):
        queue, now = rows.get(name), looked.get(rows[name].broker_topic) if name in rows else None
        shown = {"index": index, "stored": None, "in_per_s": None, "out_per_s": None, "answered": now is not None}
        if now is not None:
            shown["stored"] = now["stored"]
            key = f"console:queue-figures:{request.user.pk}:{queue.pk}"
            before = cache.get(key)
            cache.set(key, (now["t"], now["counters"]), FIGURES_KEEP_S)
            if before is not None and 1 <= now["t"] - before[0] <= FIGURES_KEEP_S:
                spent = now["t"] - before[0]
                moved = [after - earlier for after, earlier in zip(now["counters"], before[1], strict=True)]
                if min(moved) >= 0:  # (a broker restarted: no rate this time)
                    shown["in_per_s"], shown["out_per_s"] = moved[0] / spent, moved[2] / spent
        figures.append(shown)
    return page(request, "htmx/queue_figures.html", {"figures": figures})


@member_page(scope="manage")
def queue_create(request):
    from tideway_server.topics import actions
    from tideway_server.topics.api.serializers import QueueSerializer

    values = {"mode": "queue", "partitions": "3", "replication_factor": "3"}
    errors: dict[str, list[str]] = {}
    if request.method == "POST":
        values = {field: request.POST.get(field, "") for field in FIELDS if request.POST.get(field, "") != ""}
        for field in BOOLEAN_FIELDS:
            values[field] = field in request.POST
        body = QueueSerializer(data=values)
        if body.is_valid():
            try:
                queue = actions.do_create_queue(request.principal.tenant, body.validated_data, acting=request.principal.actor)
            except ActionError as exc:
                errors[_error_field(exc)] = [exc.message]
            else:
                return redirect(f"/console/queues/{queue.name}")
        else:
            errors = {field: [str(e) for e in messages] for field, messages in body.errors.items()}
    return page(request, "queue_form.html", {"values": values, "errors": errors, "fields": FIELDS},
                status=400 if errors else 200)


def _error_field(exc: ActionError) -> str:
    """The form field an action's error is about (a quota names its field), else the form as a whole."""
    return exc.details.get("field", "form") if exc.details else "form"


# What an edit may change (the control plane's rule: topics.actions._MUTABLE); the rest is shown, disabled.
EDITABLE = ["partitions", "retention_ms", "retention_bytes", "compaction", "max_message_bytes", "visibility_timeout_ms",
            "max_deliveries", "delivery_delay_ms", "schema_subject", "schema_encoding"]


@member_page(scope="manage")
def queue_edit(request, name: str):
    """Change what may change, through the API's serializer and the control plane's action (same checks, same audit)."""
    from tideway_server.topics import actions
    from tideway_server.topics.api.serializers import QueueSerializer, QueueUpdateSerializer

    queue = _queue(request, name)
    values = {field: value for field, value in QueueSerializer(queue).data.items() if field in FIELDS}
    errors: dict[str, list[str]] = {}
    if request.method == "POST":
        posted = {field: request.POST.get(field, "") for field in EDITABLE if field not in BOOLEAN_FIELDS}
        posted = {field: value for field, value in posted.items() if value != "" or field == "schema_subject"}
        posted["compaction"] = "compaction" in request.POST
        values.update(posted)
        body = QueueUpdateSerializer(data=posted, partial=True)
        if body.is_valid():
            try:
                actions.do_update_queue(queue, body.validated_data, acting=request.principal.actor)
            except ActionError as exc:
                errors[_error_field(exc)] = [exc.message]
            else:
                return redirect(f"/console/queues/{queue.name}")
        else:
            errors = {field: [str(e) for e in messages] for field, messages in body.errors.items()}
    elif request.method != "GET":
        return HttpResponseNotAllowed(["GET", "POST"])
    return page(request, "queue_edit.html", {"queue": queue, "values": values, "errors": errors, "editing": True},
                status=400 if errors else 200)


THROUGHPUT_RANGES = {"live": ("the last 2 minutes, live", None, 0), "day": ("the last 24 hours", "hour", 24),
                     "month": ("the last 30 days", "day", 30)}


def throughput_history(queue, span: str) -> dict | None:
    """The queue's messages and bytes in and out per hour (24 hours) or per day (30 days), from the usage job's
    rollups (the live chart covers only minutes); every bucket of the range, empty ones at 0. None for "live"."""
    from datetime import UTC, datetime, timedelta

    from tideway_server.billing.models import UsageRollup, UsageRun

    _words, granularity, count = THROUGHPUT_RANGES[span]
    if granularity is None:
        return None
    step = timedelta(hours=1) if granularity == "hour" else timedelta(days=1)
    now = datetime.now(UTC)
    last = now.replace(minute=0, second=0, microsecond=0) if granularity == "hour" else now.replace(
        hour=0, minute=0, second=0, microsecond=0)
    starts = [last - step * i for i in range(count - 1, -1, -1)]
    fields = ("messages_in", "messages_out", "bytes_in", "bytes_out")
    figures = {field: dict.fromkeys(starts, 0) for field in fields}
    for start, metric, value in UsageRollup.objects.filter(
            tenant=queue.tenant, queue=queue.name, granularity=granularity, start__gte=starts[0],
            metric__in=fields).values_list("start", "metric", "value"):
        if start in figures[metric]:
            figures[metric][start] += value
    run = UsageRun.objects.filter(finished__isnull=False).order_by("-finished").first()
    return {"t": [int(s.timestamp()) for s in starts], "span": int(step.total_seconds()) * count,
            "unit": f"/ {granularity}", **{field: list(figures[field].values()) for field in fields},
            "computed_at": run.finished.isoformat() if run else None}


@require_safe
@member_page()
def queue_detail(request, name: str):
    queue = _queue(request, name)
    span = request.GET.get("range", "live") if request.GET.get("range") in THROUGHPUT_RANGES else "live"
    history = throughput_history(queue, span) if request.principal.has_scope("consume") else None
    return page(request, "queue.html", {"queue": queue, "settings": _settings_in_words(queue),
                                        "partitions": partition_table(queue), "range": span, "history": history,
                                        "ranges": [(key, words) for key, (words, _g, _c) in THROUGHPUT_RANGES.items()]})


def _settings_in_words(queue) -> list[tuple[str, str]]:
    """A queue's settings as people read them (units, yes/no), in the order of the create form."""
    from tideway_server.controlplane.units import duration_ms, size

    rows = [("Mode", queue.mode), ("Partitions", f"{queue.partitions:,}"), ("Replicas", str(queue.replication_factor)),
            ("Keeps messages", duration_ms(queue.retention_ms)),
            ("Keeps at most", f"{size(queue.retention_bytes)} per partition"),
            ("Compaction", "on: the latest message per key is kept" if queue.compaction else "off"),
            ("Largest message", size(queue.max_message_bytes))]
    if queue.mode == "queue":
        rows += [("Visibility timeout", duration_ms(queue.visibility_timeout_ms)),
                 ("Dead-lettered after", f"{queue.max_deliveries} deliver{'y' if queue.max_deliveries == 1 else 'ies'}"),
                 ("Delivery delay", duration_ms(queue.delivery_delay_ms) if queue.delivery_delay_ms else "none"),
                 ("FIFO", "yes" if queue.fifo else "no"), ("Dead-letter queue", f"{queue.name}.dlq")]
    rows += [("Schema", f"{queue.schema_subject} ({queue.schema_encoding})" if queue.schema_subject else "none"),
             ("Cluster", queue.cluster.name), ("Created", queue.created.strftime("%Y-%m-%d %H:%M UTC"))]
    return rows


@require_safe
@member_page(scope="consume")
def queue_groups(request, name: str):
    """One page of the queue's consumer groups, furthest behind first, with lag and time-to-drain (HTMX refreshes it;
    ``q`` searches the names, ``page`` picks the page)."""
    from tideway_server.webui import data
    from tideway_server.webui.groups import GroupPage, groups_of

    info = data.queue_info(request.principal, name)
    search = request.GET.get("q", "").strip()[:100]
    try:
        number = int(request.GET.get("page", "1"))
    except ValueError:
        number = 1
    try:
        shown, error = groups_of(info, data.run, search=search, page=number), ""
    except Exception as exc:  # noqa: BLE001 - the brokers did not answer: say so on the page
        shown, error = GroupPage(), f"the brokers did not answer: {exc}"
    return page(request, "queue.html", {"queue": info, "groups": shown.groups, "group_page": shown, "group_search": search,
                                        "groups_error": error, "may_consume": request.principal.has_scope("consume")},
                partial="groups.html")


@require_safe
@member_page(scope="consume")
def group_detail(request, name: str, group: str):
    """One group on one queue: its members and their partitions, and per partition its position and lag."""
    from tideway_server.gateway import operations
    from tideway_server.gateway.errors import GatewayError
    from tideway_server.webui import data

    info = data.queue_info(request.principal, name)
    kind = request.GET.get("kind") or ("queue" if info.is_queue else "stream")
    try:
        view = data.run(operations.group_view, data.caller_for(request.principal), info, group, kind)
    except GatewayError as exc:
        return page(request, "group.html", {"queue": info, "group": group, "kind": kind, "error": data.refusal(exc)},
                    status=exc.status)
    except Exception as exc:  # noqa: BLE001 - the brokers did not answer: say so on the page
        return page(request, "group.html", {"queue": info, "group": group, "kind": kind,
                                            "error": f"the brokers did not answer: {exc}"})
    return page(request, "group.html", {"queue": info, "group": group, "kind": kind, "view": view,
                                        "lag": sum(p["lag"] or 0 for p in view["partitions"]),
                                        "may_consume": request.principal.has_scope("consume"),
                                        **_lag_history(request, info, group, kind)})


LAG_RANGES = {"hour": "minute", "2days": "hour", "90days": "day"}


def _lag_history(request, info, group: str, kind: str) -> dict:
    """The group's status, time-to-drain and lag over a range (the consumer_lag job's; lag.history)."""
    from tideway_server.lag.history import group_lag

    span = request.GET.get("range", "hour")
    step = LAG_RANGES.get(span, "minute")
    try:
        history = group_lag(request.principal.tenant, info.name, group, kind=kind, step=step)
    except ActionError:
        history = None  # nothing recorded yet
    return {"history": history, "range": span if span in LAG_RANGES else "hour",
            "lag_ranges": [("hour", "last hour"), ("2days", "2 days"), ("90days", "90 days")]}


@member_page(scope="consume")
def group_reset(request, name: str, group: str):
    """Move a stream group with no members to the earliest, the latest, an offset or a time
    (gateway.operations.groups.reset_idle_group), after a preview of where each partition's position goes."""
    from datetime import UTC, datetime

    from tideway_server.gateway.errors import GatewayError
    from tideway_server.gateway.operations.groups import preview_reset, reset_idle_group
    from tideway_server.webui import data

    if request.method != "POST":
        return redirect(f"/console/queues/{name}")
    info = data.queue_info(request.principal, name)
    caller = data.caller_for(request.principal)
    where = request.POST.get("to", "earliest")
    form = {"to": where, "offset": request.POST.get("offset", ""), "time": request.POST.get("time", "")}
    kwargs: dict = {}
    try:
        if where in ("earliest", "latest"):
            kwargs["to"] = where
        elif where == "offset":
            kwargs["offset"] = int(form["offset"])
        elif where == "time":
            moment = datetime.fromisoformat(form["time"]).replace(tzinfo=UTC)
            kwargs["timestamp_ms"] = int(moment.timestamp() * 1000)
        else:
            raise ValueError(where)
    except ValueError:
        return page(request, "group_reset.html", {"queue": info, "group": group,
                                                  "error": "give an offset (a whole number) or a time (UTC)"}, status=400)
    context = {"queue": info, "group": group, "form": form}
    try:
        if request.POST.get("step") != "apply":  # first, what it would do
            return page(request, "group_reset.html", {**context, "preview": data.run(preview_reset, caller, info, group, **kwargs)})
        positions = data.run(reset_idle_group, caller, info, group, **kwargs)
    except GatewayError as exc:
        return page(request, "group_reset.html", {**context, "error": data.refusal(exc)}, status=exc.status)
    return page(request, "group_reset.html", {**context, "positions": sorted(positions.items())})


@member_page(scope="manage")
def group_delete(request, name: str, group: str):
    """Delete an idle stream group's positions on this queue (the group itself once it has none left), after
    typing its name."""
    from tideway_server.gateway.errors import GatewayError
    from tideway_server.gateway.operations.groups import delete_idle_group
    from tideway_server.tenants import audit
    from tideway_server.webui import data
    from tideway_server.webui.render import confirmation, confirmed, error_page, sentence

    info = data.queue_info(request.principal, name)
    if not confirmed(request, group):
        return confirmation(
            request, title=f"Delete the group {group} of {name}",
            consequence=f"The group's positions on {name} are forgotten: a consumer that joins {group} later starts "
                        "where its client's reset policy says (earliest or latest), not where the group was. The group "
                        "must have no member connected.",
            undo="This cannot be undone: note its positions (on its page) to put them back with a reset.",
            word=group, word_label="the group's name", button="Delete group",
            cancel=f"/console/queues/{name}/groups/{group}",
            error="" if request.method != "POST" else f"type the group's name ({group}) to delete it")
    try:
        count = data.run(delete_idle_group, data.caller_for(request.principal), info, group)
    except GatewayError as exc:
        return error_page(request, exc.status, sentence(data.refusal(exc)))
    audit.record(request.principal.tenant, request.principal.actor, "group.delete", f"{name}/{group}", positions=count)
    return redirect(f"/console/queues/{name}?deleted_group={group}")


@require_safe
@member_page(scope="consume")
def queue_counters(request, name: str):
    """The queue's traffic counters since the brokers started (messages and bytes in and out), with the server's
    time, as server-sent events: one a second for ``live.STREAM_S`` (the browser's EventSource then reconnects,
    which checks the member again)."""
    from tideway_server.webui import data, live

    info = data.queue_info(request.principal, name)
    return live.counter_events(info, request.user.pk)


@require_safe
@member_page()
def queue_partitions(request, name: str):
    """The partition table alone (HTMX refreshes it)."""
    queue = _queue(request, name)
    return page(request, "queue.html", {"queue": queue, "partitions": partition_table(queue)}, partial="partitions.html")


UNKNOWN_STATE = {"first": None, "high_watermark": None, "log_end": None, "size_bytes": None, "segments": None}


def partition_table(queue) -> dict:
    """Leader, replicas and ISR from the controller's records; offsets and sizes from the leaders (when they answer)."""
    from tideway_server.clusters.models import Partition
    from tideway_server.topics.actions import partition_states

    rows = list(Partition.objects.filter(topic__cluster=queue.cluster, topic__name=queue.broker_topic).order_by("index"))
    try:
        states = partition_states(queue)
        error = "" if len(states) >= len(rows) else "some partitions have no leader that answered"
    except Exception as exc:  # noqa: BLE001 - the page shows what it knows and says why the rest is missing
        states, error = {}, f"the brokers did not answer: {exc}"
    return {"rows": [{"index": p.index, "leader": p.leader, "replicas": p.replicas, "isr": p.isr,
                      "under_replicated": len(p.isr) < len(p.replicas), **states.get(p.index, UNKNOWN_STATE)}
                     for p in rows],
            "error": error}


@member_page(scope="manage")
def queue_purge(request, name: str):
    """Delete every message the queue holds now, after typing its name (the queue and its settings stay)."""
    from tideway_server.gateway.errors import GatewayError
    from tideway_server.gateway.operations import purge_queue
    from tideway_server.tenants import audit
    from tideway_server.webui import data
    from tideway_server.webui.render import confirmation, confirmed, error_page, sentence

    info = data.queue_info(request.principal, name)
    if not confirmed(request, name):
        groups = "queue groups forget them too, also those received and not yet acknowledged" if info.is_queue else (
            "stream groups keep their positions; one below what is left reads from the first message left")
        return confirmation(
            request, title=f"Purge the messages of {name}",
            consequence=f"Every message {name} holds now is deleted from every partition and every replica ({groups}). "
                        "Messages published from now on are kept. The queue, its settings, its dead letters and its "
                        "groups stay.",
            undo="This cannot be undone: the messages are gone for every reader.",
            word=name, word_label="the queue's name", button="Purge messages",
            cancel=f"/console/queues/{name}",
            error="" if request.method != "POST" else f"type the queue's name ({name}) to purge it")
    try:
        purged = data.run(purge_queue, data.caller_for(request.principal), info)
    except GatewayError as exc:
        return error_page(request, exc.status, sentence(data.refusal(exc)))
    audit.record(request.principal.tenant, request.principal.actor, "queue.purge", name, purged=purged["purged"])
    return redirect(f"/console/queues/{name}?purged={purged['purged']}")


@member_page(scope="manage")
def queue_delete(request, name: str):
    from tideway_server.topics import actions

    queue = _queue(request, name)
    error = ""
    if request.method == "POST":
        if request.POST.get("confirm", "") != queue.name:
            error = f"type the queue's name ({queue.name}) to delete it"
        else:
            try:
                actions.do_delete_queue(queue, acting=request.principal.actor)
            except ActionError as exc:
                error = exc.message
            else:
                return redirect("/console/queues")
    elif request.method != "GET":
        return HttpResponseNotAllowed(["GET", "POST"])
    return page(request, "queue_delete.html", {"queue": queue, "error": error}, status=400 if error else 200)
