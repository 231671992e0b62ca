"""Queues and topics of the caller's tenant, by name: list, create, retrieve, update, delete."""

from __future__ import annotations

from urllib.parse import urlencode

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response
from rest_framework.views import APIView
from tideway_server.controlplane.api.errors import not_found
from tideway_server.topics import actions
from tideway_server.topics.api.serializers import QueueSerializer, QueueUpdateSerializer
from tideway_server.topics.choices import QueueMode
from tideway_server.topics.models import Queue

TAG = ["queues"]
DEAD_LETTER_SUFFIX = ".dlq"
LIST_LIMIT_DEFAULT = 100  # queues a list page holds unless ``limit`` says otherwise
LIST_LIMIT_MAX = 1000


def dead_letter_queue_json(queue: Queue) -> dict:
    """What ``GET /api/v1/queues/NAME.dlq`` answers: the dead-letter queue a queue reports, and where its letters are."""
    if queue.mode != QueueMode.QUEUE:
        raise not_found(f"queue {queue.name + DEAD_LETTER_SUFFIX!r} (a stream has no dead-letter queue)",
                        code="queue_not_found")
    return {"name": queue.name + DEAD_LETTER_SUFFIX, "kind": "dead_letter_queue", "queue": queue.name,
            "partitions": queue.partitions, "replication_factor": queue.replication_factor,
            "max_deliveries": queue.max_deliveries,
            "messages_url": f"/api/v1/queues/{queue.name}/dead-letters",
            "redrive_url": f"/api/v1/queues/{queue.name}/dead-letters/redrive"}


class ListPage(serializers.Serializer):
    limit = serializers.IntegerField(min_value=1, max_value=LIST_LIMIT_MAX, default=LIST_LIMIT_DEFAULT)
    after = serializers.CharField(max_length=100, required=False, help_text="the last name of the page before")


class QueueListView(APIView):
    @extend_schema(parameters=[ListPage], responses=QueueSerializer(many=True), tags=TAG,
                   description=f"The tenant's queues by name, {LIST_LIMIT_DEFAULT} a page (``limit`` up to "
                               f"{LIST_LIMIT_MAX}); a ``Link`` header (rel=\"next\") names the next page.")
    def get(self, request):
        query = ListPage(data=request.query_params)
        query.is_valid(raise_exception=True)
        limit, after = query.validated_data["limit"], query.validated_data.get("after")
        rows = Queue.objects.filter(tenant=request.auth.tenant).select_related("cluster").order_by("name")
        if after is not None:
            rows = rows.filter(name__gt=after)
        listed = []
        for queue in rows.iterator(chunk_size=limit + 1):  # a key limited to some names skips the others
            if request.auth.may_touch(queue.name):
                listed.append(queue)
                if len(listed) > limit:
                    break
        response = Response(QueueSerializer(listed[:limit], many=True).data)
        if len(listed) > limit:
            response["Link"] = f'<{request.path}?{urlencode({"after": listed[limit - 1].name, "limit": limit})}>; rel="next"'
        return response

    @extend_schema(request=QueueSerializer, responses={201: QueueSerializer}, tags=TAG)
    def post(self, request):
        body = QueueSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        if not request.auth.may_touch(body.validated_data["name"]):
            raise PermissionDenied(f"this API key may not touch queue {body.validated_data['name']!r}")
        queue = actions.do_create_queue(request.auth.tenant, body.validated_data, acting=request.auth.actor)
        return Response(QueueSerializer(queue).data, status=status.HTTP_201_CREATED)


class QueueDetailView(APIView):
    def _queue(self, request, name: str) -> Queue:
        queue = Queue.objects.filter(tenant=request.auth.tenant, name=name).select_related("cluster", "tenant", "tenant__plan").first()
        if queue is None or not request.auth.may_touch(name):
            raise not_found(f"queue {name!r}", code="queue_not_found")
        return queue

    @extend_schema(responses=QueueSerializer, tags=TAG,
                   description="A queue; ``NAME.dlq`` describes the dead-letter queue of queue NAME.")
    def get(self, request, name: str):
        if name.endswith(DEAD_LETTER_SUFFIX):
            return Response(dead_letter_queue_json(self._queue(request, name[: -len(DEAD_LETTER_SUFFIX)])))
        return Response(QueueSerializer(self._queue(request, name)).data)

    @extend_schema(request=QueueUpdateSerializer, responses=QueueSerializer, tags=TAG)
    def patch(self, request, name: str):
        queue = self._queue(request, name)
        body = QueueUpdateSerializer(data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        queue = actions.do_update_queue(queue, body.validated_data, acting=request.auth.actor)
        return Response(QueueSerializer(queue).data)

    @extend_schema(responses={204: None}, tags=TAG, summary="Delete the queue and its data")
    def delete(self, request, name: str):
        actions.do_delete_queue(self._queue(request, name), acting=request.auth.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)
