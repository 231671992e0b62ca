"""Alert rules and notification channels over the REST API (tenant-isolated: every lookup is by the caller's
tenant; another tenant's rule or channel is not found)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView
from tideway_server.alerts import actions
from tideway_server.alerts.models import AlertRule, Delivery, NotificationChannel
from tideway_server.controlplane.api.errors import not_found

RULES, CHANNELS = ["alerts"], ["notification channels"]
HISTORY_LIMIT = 200


def _body(request) -> dict:
    """The JSON object sent (400 when it is anything else)."""
    from tideway_server.controlplane.errors import ActionError

    if not isinstance(request.data, dict):
        raise ActionError("invalid_request", "the body is a JSON object")
    return dict(request.data)


def _rule(request, rule_id: int) -> AlertRule:
    rule = AlertRule.objects.filter(tenant=request.auth.tenant, pk=rule_id).prefetch_related("channels").first()
    if rule is None:
        raise not_found(f"alert rule {rule_id}", code="alert_not_found")
    return rule


def _channel(request, channel_id: int) -> NotificationChannel:
    channel = NotificationChannel.objects.filter(tenant=request.auth.tenant, pk=channel_id).select_related("tenant").first()
    if channel is None:
        raise not_found(f"notification channel {channel_id}", code="channel_not_found")
    return channel


class RuleListView(APIView):
    @extend_schema(responses={200: dict}, tags=RULES, summary="The tenant's alert rules with their state")
    def get(self, request):
        rows = AlertRule.objects.filter(tenant=request.auth.tenant).prefetch_related("channels").order_by("name")
        return Response([actions.rule_json(r) for r in rows])

    @extend_schema(request=dict, responses={201: dict}, tags=RULES, summary="Create an alert rule",
                   description="metric, queue, group, comparator, threshold, recovery_threshold, pending {m, n}, "
                               "missing_data, repeat_interval_s, channels (names), enabled, silenced_until")
    def post(self, request):
        rule = actions.do_create_rule(request.auth.tenant, _body(request), acting=request.auth.actor)
        return Response(actions.rule_json(rule), status=status.HTTP_201_CREATED)


class RuleDetailView(APIView):
    @extend_schema(responses={200: dict}, tags=RULES)
    def get(self, request, rule_id: int):
        return Response(actions.rule_json(_rule(request, rule_id)))

    @extend_schema(request=dict, responses={200: dict}, tags=RULES, summary="Change an alert rule (or silence it)")
    def patch(self, request, rule_id: int):
        rule = actions.do_update_rule(_rule(request, rule_id), _body(request), acting=request.auth.actor)
        return Response(actions.rule_json(rule))

    @extend_schema(responses={204: None}, tags=RULES)
    def delete(self, request, rule_id: int):
        actions.do_delete_rule(_rule(request, rule_id), acting=request.auth.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)


class RuleHistoryView(APIView):
    @extend_schema(responses={200: dict}, tags=RULES, summary="The rule's transitions, newest first, with their deliveries")
    def get(self, request, rule_id: int):
        rule = _rule(request, rule_id)
        events = rule.events.order_by("-sequence")[:HISTORY_LIMIT]
        return Response({"rule": actions.rule_json(rule), "events": [actions.event_json(e) for e in events]})


class ChannelListView(APIView):
    @extend_schema(responses={200: dict}, tags=CHANNELS)
    def get(self, request):
        rows = NotificationChannel.objects.filter(tenant=request.auth.tenant).order_by("name")
        return Response([actions.channel_json(c) for c in rows])

    @extend_schema(request=dict, responses={201: dict}, tags=CHANNELS, summary="Create a webhook or e-mail channel",
                   description="A webhook's signing secret is in this answer only: keep it.")
    def post(self, request):
        channel, secret = actions.do_create_channel(request.auth.tenant, _body(request), acting=request.auth.actor)
        return Response({**actions.channel_json(channel), "secret": secret}, status=status.HTTP_201_CREATED)


class ChannelDetailView(APIView):
    @extend_schema(responses={200: dict}, tags=CHANNELS)
    def get(self, request, channel_id: int):
        return Response(actions.channel_json(_channel(request, channel_id)))

    @extend_schema(responses={204: None}, tags=CHANNELS)
    def delete(self, request, channel_id: int):
        actions.do_delete_channel(_channel(request, channel_id), acting=request.auth.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ChannelRotateView(APIView):
    @extend_schema(request=dict, responses={200: dict}, tags=CHANNELS, summary="Rotate a webhook's signing secret",
                   description='{"finish": false} (default) adds a new secret, shown once; both sign until '
                               '{"finish": true} drops the older one.')
    def post(self, request, channel_id: int):
        channel = _channel(request, channel_id)
        secret = actions.do_rotate_secret(channel, acting=request.auth.actor, finish=_body(request).get("finish") is True)
        return Response({**actions.channel_json(channel), "secret": secret})


class ChannelTestView(APIView):
    @extend_schema(responses={200: dict}, tags=CHANNELS, summary="Send a test notification now")
    def post(self, request, channel_id: int):
        return Response(actions.delivery_json(actions.do_test_channel(_channel(request, channel_id), acting=request.auth.actor)))


class ChannelDeliveriesView(APIView):
    @extend_schema(responses={200: dict}, tags=CHANNELS, summary="Deliveries to the channel (90 days), newest first")
    def get(self, request, channel_id: int):
        channel = _channel(request, channel_id)
        rows = Delivery.objects.filter(channel=channel).select_related("channel").order_by("-created")[:HISTORY_LIMIT]
        return Response([actions.delivery_json(d) for d in rows])
