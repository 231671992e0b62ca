"""A consumer group's lag over the REST API: live, status, time-to-drain and history."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView
from tideway_server.controlplane.api.errors import not_found
from tideway_server.controlplane.errors import ActionError
from tideway_server.lag.history import group_lag


class GroupLagView(APIView):
    """Lag of one of the queue's consumer groups: the latest look (every few seconds: lag in messages and seconds,
    rates, in flight), its status and time-to-drain over the last window, and its history at a step."""

    @extend_schema(
        parameters=[
            OpenApiParameter("kind", str, enum=["stream", "queue"], description="the group's kind (default: stream)"),
            OpenApiParameter("from", str, description="start, ISO 8601 (default: to minus an hour, 2 days or 90 days by step)"),
            OpenApiParameter("to", str, description="end, exclusive (default: now)"),
            OpenApiParameter("step", str, enum=["minute", "hour", "day"], description="default: minute"),
            OpenApiParameter("partition", int, description="one partition's history (default: the whole group)"),
        ],
        responses={200: dict}, tags=["lag"],
    )
    def get(self, request, name: str, group: str):
        from tideway_server.topics.models import Queue

        if not request.auth.may_touch(name) or not Queue.objects.filter(tenant=request.auth.tenant, name=name).exists():
            raise not_found(f"queue {name!r}", code="queue_not_found")
        params = request.query_params
        partition = params.get("partition")
        if partition is not None and not (partition.isdigit() and int(partition) < 100_000):
            raise ActionError("invalid_request", "partition is a partition number", details={"field": "partition"})
        return Response(group_lag(request.auth.tenant, name, group, kind=params.get("kind", "stream"),
                                  start=params.get("from"), end=params.get("to"), step=params.get("step", "minute"),
                                  partition=None if partition is None else int(partition)))
