"""Usage over the REST API: what the tenant used, by hour or day, by metric or queue."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.usage import usage


class UsageView(APIView):
    """The caller's tenant's metered usage (messages and bytes in and out, requests, storage), from the latest
    run of the usage_billing job (``computed_at``)."""

    @extend_schema(
        parameters=[
            OpenApiParameter("from", str, description="start, ISO 8601 (default: the start of this month, UTC)"),
            OpenApiParameter("to", str, description="end, exclusive (default: now)"),
            OpenApiParameter("granularity", str, enum=["hour", "day"], description="default: day"),
            OpenApiParameter("group_by", str, enum=["metric", "queue"], description="default: metric"),
        ],
        responses={200: dict}, tags=["usage"],
    )
    def get(self, request):
        params = request.query_params
        return Response(usage(request.auth.tenant, start=params.get("from"), end=params.get("to"),
                              granularity=params.get("granularity", "day"), group_by=params.get("group_by", "metric")))
