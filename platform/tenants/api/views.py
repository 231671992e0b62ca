"""The tenant's own resources: itself, API keys, members and the audit log; sign-up; operators' tenants."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import APIView
from tideway_server.controlplane.api.errors import not_found
from tideway_server.controlplane.api.permissions import ANY_SCOPE
from tideway_server.controlplane.errors import ActionError
from tideway_server.tenants import actions
from tideway_server.tenants.api.serializers import (
    AcceptInvitationSerializer,
    ApiKeySerializer,
    AuditEntrySerializer,
    AwsCredentialsSerializer,
    CurrentTenantSerializer,
    InvitationSerializer,
    MemberRoleSerializer,
    MemberSerializer,
    NewApiKeySerializer,
    OperatorTenantSerializer,
    PlanSerializer,
    RotateApiKeySerializer,
    SignupFinishSerializer,
    SignupSerializer,
    TenantSerializer,
)
from tideway_server.tenants.models import ApiKey, AuditEntry, Invitation, Membership, Plan, Tenant

AUDIT_LIMIT_MAX = 1000


def _throttled(tenant_id: int) -> dict | None:
    import redis
    from django.conf import settings
    from tideway_server.gateway.limits import throttled_counts

    connection = redis.Redis.from_url(settings.TIDEWAY_REDIS_URL, socket_timeout=2, socket_connect_timeout=1)
    try:
        return throttled_counts(connection, [tenant_id])[tenant_id]
    except (redis.RedisError, OSError):
        return None
    finally:
        connection.close()


class CurrentTenantView(APIView):
    """The tenant the caller acts for, its plan and what its queues take from the quotas."""

    @extend_schema(responses=CurrentTenantSerializer, tags=["tenant"])
    def get(self, request):
        from tideway_server.topics.actions import footprint

        tenant = request.auth.tenant
        used = footprint(tenant)
        return Response(CurrentTenantSerializer({
            "tenant": tenant,
            "usage": {"queues": used.queues, "partitions": used.partitions, "reserved_storage_bytes": used.storage_bytes},
            "throttled": _throttled(tenant.pk),
        }).data)


class ApiKeyListView(APIView):
    required_scopes = {"GET": "manage", "POST": "manage"}
    members_admin = True

    @extend_schema(responses=ApiKeySerializer(many=True), tags=["API keys"])
    def get(self, request):
        return Response(ApiKeySerializer(ApiKey.objects.filter(tenant=request.auth.tenant), many=True).data)

    @extend_schema(request=ApiKeySerializer, responses={201: NewApiKeySerializer}, tags=["API keys"])
    def post(self, request):
        body = ApiKeySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        row, key = actions.do_create_api_key(request.auth.tenant, name=body.validated_data["name"],
                                             scopes=body.validated_data["scopes"],
                                             queue_patterns=body.validated_data.get("queue_patterns"),
                                             expires_at=body.validated_data.get("expires_at"), acting=request.auth.actor)
        row.key = key
        return Response(NewApiKeySerializer(row).data, status=status.HTTP_201_CREATED)


def _tenant_key(request, prefix: str) -> ApiKey:
    row = ApiKey.objects.filter(tenant=request.auth.tenant, prefix=prefix).select_related("tenant").first()
    if row is None:
        raise not_found(f"API key {prefix!r}")
    return row


class ApiKeyDetailView(APIView):
    required_scopes = {"GET": "manage", "DELETE": "manage"}
    members_admin = True

    def _key(self, request, prefix: str) -> ApiKey:
        return _tenant_key(request, prefix)

    @extend_schema(responses=ApiKeySerializer, tags=["API keys"])
    def get(self, request, prefix: str):
        return Response(ApiKeySerializer(self._key(request, prefix)).data)

    @extend_schema(responses=ApiKeySerializer, tags=["API keys"], summary="Revoke the key (it stops working at once)")
    def delete(self, request, prefix: str):
        return Response(ApiKeySerializer(actions.do_revoke_api_key(self._key(request, prefix), acting=request.auth.actor)).data)


class ApiKeyRotateView(APIView):
    required_scopes = {"POST": "manage"}
    members_admin = True

    @extend_schema(request=RotateApiKeySerializer, responses={201: NewApiKeySerializer}, tags=["API keys"],
                   summary="Rotate: a new key with the same name, scopes and patterns; the old one keeps working "
                           "grace_s seconds more")
    def post(self, request, prefix: str):
        body = RotateApiKeySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        row, key = actions.do_rotate_api_key(_tenant_key(request, prefix), grace_s=body.validated_data["grace_s"],
                                             acting=request.auth.actor)
        row.key = key
        return Response(NewApiKeySerializer(row).data, status=status.HTTP_201_CREATED)


class AwsCredentialsView(APIView):
    required_scopes = {"POST": "manage", "DELETE": "manage"}
    members_admin = True

    @extend_schema(request=None, responses={201: AwsCredentialsSerializer}, tags=["API keys"],
                   summary="AWS credentials acting as this key on the SQS endpoint (the secret is shown only now; "
                           "issuing again replaces them)")
    def post(self, request, prefix: str):
        from django.conf import settings

        access_key, secret = actions.do_issue_aws_credentials(_tenant_key(request, prefix), acting=request.auth.actor)
        answer = {"access_key_id": access_key, "secret_access_key": secret, "region": settings.TIDEWAY_SQS_REGION,
                  "endpoint_url": request.build_absolute_uri("/sqs/")}
        return Response(AwsCredentialsSerializer(answer).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={204: None}, tags=["API keys"], summary="Revoke the key's AWS credentials")
    def delete(self, request, prefix: str):
        actions.do_revoke_aws_credentials(_tenant_key(request, prefix), acting=request.auth.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MemberListView(APIView):
    required_scopes = {"GET": ANY_SCOPE, "POST": "manage"}
    members_admin = True

    @extend_schema(responses=MemberSerializer(many=True), tags=["members"])
    def get(self, request):
        rows = Membership.objects.filter(tenant=request.auth.tenant).select_related("user")
        return Response(MemberSerializer(rows, many=True).data)

    @extend_schema(request=None, responses={409: None}, tags=["members"],
                   summary="Refused: members join by accepting an invitation (POST /api/v1/invitations/)")
    def post(self, request):
        raise ActionError("by_invitation", "members join by accepting an invitation: invite their e-mail address "
                                           "with POST /api/v1/invitations/")


class InvitationListView(APIView):
    required_scopes = {"GET": "manage", "POST": "manage"}
    members_admin = True

    @extend_schema(responses=InvitationSerializer(many=True), tags=["members"])
    def get(self, request):
        from tideway_server.tenants.invitations import PENDING_MAX, pending_invitations

        return Response(InvitationSerializer(pending_invitations(request.auth.tenant)[:PENDING_MAX], many=True).data)

    @extend_schema(request=InvitationSerializer, responses={201: InvitationSerializer}, tags=["members"],
                   summary="Invite an e-mail address (e-mailed the link; the answer carries it too)")
    def post(self, request):
        from tideway_server.tenants.invitations import do_invite, token_for

        body = InvitationSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        row, link = do_invite(request.auth.tenant, email=body.validated_data["email"], role=body.validated_data["role"],
                              acting=request.auth.actor, site=request.build_absolute_uri("/"))
        row.link, row.token = link, token_for(row)
        return Response(InvitationSerializer(row).data, status=status.HTTP_201_CREATED)


class InvitationDetailView(APIView):
    required_scopes = {"DELETE": "manage"}
    members_admin = True

    @extend_schema(responses={204: None}, tags=["members"], summary="Cancel an invitation (its link stops working)")
    def delete(self, request, invitation_id: str):
        from tideway_server.tenants.invitations import do_cancel_invitation

        row = Invitation.objects.filter(tenant=request.auth.tenant, pk=int(invitation_id)).select_related("tenant").first()
        if row is None:
            raise not_found(f"invitation {invitation_id}")
        do_cancel_invitation(row, acting=request.auth.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)


class InvitationAcceptView(APIView):
    """The invitee, acting themselves: signs in (their user name and password) or creates their own account."""

    public = True
    authentication_classes: list = []

    @extend_schema(request=AcceptInvitationSerializer, responses={201: MemberSerializer}, tags=["members"], auth=[])
    def post(self, request):
        from django.contrib.auth import authenticate
        from tideway_server.tenants.invitations import (
            do_accept,
            do_sign_up_and_accept,
            invitation_for,
        )

        body = AcceptInvitationSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        row = invitation_for(data["token"])
        if data["new_account"]:
            membership = do_sign_up_and_accept(row, username=data["username"], password=data["password"])
        else:
            user = authenticate(request=request._request, username=data["username"], password=data["password"])
            if user is None or not user.is_active:
                raise exceptions.AuthenticationFailed("the user name or password is not valid")
            membership = do_accept(row, user)
        return Response(MemberSerializer(membership).data, status=status.HTTP_201_CREATED)


class MemberDetailView(APIView):
    required_scopes = {"GET": ANY_SCOPE, "PATCH": "manage", "DELETE": "manage"}
    members_admin = True

    def _member(self, request, username: str) -> Membership:
        row = Membership.objects.filter(tenant=request.auth.tenant, user__username=username).select_related("user", "tenant").first()
        if row is None:
            raise not_found(f"member {username!r}")
        return row

    @extend_schema(responses=MemberSerializer, tags=["members"])
    def get(self, request, username: str):
        return Response(MemberSerializer(self._member(request, username)).data)

    @extend_schema(request=MemberRoleSerializer, responses=MemberSerializer, tags=["members"])
    def patch(self, request, username: str):
        body = MemberRoleSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        membership = actions.do_change_role(self._member(request, username), body.validated_data["role"], acting=request.auth.actor)
        return Response(MemberSerializer(membership).data)

    @extend_schema(responses={204: None}, tags=["members"])
    def delete(self, request, username: str):
        actions.do_remove_member(self._member(request, username), acting=request.auth.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)


class AuditLogView(APIView):
    """Management actions on the tenant, newest first."""

    required_scopes = {"GET": "manage"}

    @extend_schema(parameters=[OpenApiParameter("action", str), OpenApiParameter("limit", int)],
                   responses=AuditEntrySerializer(many=True), tags=["audit log"])
    def get(self, request):
        rows = AuditEntry.objects.filter(tenant=request.auth.tenant)
        if request.query_params.get("action"):
            rows = rows.filter(action=request.query_params["action"])
        try:
            limit = min(max(int(request.query_params.get("limit", 100)), 1), AUDIT_LIMIT_MAX)
        except ValueError:
            limit = 100
        return Response(AuditEntrySerializer(rows[:limit], many=True).data)


class SignupView(APIView):
    """Sign up, step one: a link to finish is sent to the e-mail address. The answer is the same whatever the
    address (it never tells who has an account); outside production (TIDEWAY_SIGNUP_LINK_ON_PAGE) it carries the
    link and its token, as no mail may be sent there."""

    public = True
    authentication_classes: list = []

    @extend_schema(request=SignupSerializer, responses={202: None}, tags=["tenant"], auth=[])
    def post(self, request):
        from django.conf import settings
        from tideway_server.tenants.signup import SIGNUP_LINK_DAYS, send_link, token_for

        body = SignupSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        email = body.validated_data["email"].strip().lower()
        token = token_for(email)
        link = request.build_absolute_uri(f"/console/signup/{token}")
        send_link(request.META.get("REMOTE_ADDR", ""), email, link)
        answer = {"detail": f"a link to finish signing up was sent to {email}; it works for {SIGNUP_LINK_DAYS} day "
                            "(the console's page at the link, or POST /api/v1/signup/finish with its token)"}
        if settings.SIGNUP_LINK_ON_PAGE:
            answer.update(link=link, token=token)
        return Response(answer, status=status.HTTP_202_ACCEPTED)


class SignupFinishView(APIView):
    """Sign up, step two, with the link's token: a user and their tenant on the free plan, the user its owner."""

    public = True
    authentication_classes: list = []

    @extend_schema(request=SignupFinishSerializer, responses={201: TenantSerializer}, tags=["tenant"], auth=[])
    def post(self, request):
        from django.contrib.auth import get_user_model
        from tideway_server.tenants.signup import email_for

        body = SignupFinishSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        email = email_for(data.pop("token"))
        if email is None:
            raise ActionError("not_found", "this sign-up link is not valid or has expired (links last a day): sign up again")
        if get_user_model().objects.filter(email__iexact=email).exists():
            raise ActionError("not_found", f"this sign-up link was used: an account for {email} exists (sign in)")
        _, tenant = actions.do_signup(email=email, **data)
        return Response(TenantSerializer(tenant).data, status=status.HTTP_201_CREATED)


class OperatorPlanListView(APIView):
    operator_only = True

    @extend_schema(responses=PlanSerializer(many=True), tags=["operators"])
    def get(self, request):
        return Response(PlanSerializer(Plan.objects.all(), many=True).data)


class OperatorTenantListView(APIView):
    operator_only = True

    @extend_schema(responses=OperatorTenantSerializer(many=True), tags=["operators"])
    def get(self, request):
        return Response(OperatorTenantSerializer(Tenant.objects.select_related("plan"), many=True).data)

    @extend_schema(request=OperatorTenantSerializer, responses={201: OperatorTenantSerializer}, tags=["operators"])
    def post(self, request):
        body = OperatorTenantSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        tenant = actions.do_create_tenant(data["name"], plan_name=data["plan"].name if data.get("plan") else "free",
                                          slug=data.get("slug"), region=data.get("region", "local"), acting=request.auth.actor)
        return Response(OperatorTenantSerializer(tenant).data, status=status.HTTP_201_CREATED)


class OperatorTenantDetailView(APIView):
    operator_only = True

    def _tenant(self, slug: str) -> Tenant:
        tenant = Tenant.objects.select_related("plan").filter(slug=slug).first()
        if tenant is None:
            raise not_found(f"tenant {slug!r}")
        return tenant

    @extend_schema(responses=OperatorTenantSerializer, tags=["operators"])
    def get(self, request, slug: str):
        return Response(OperatorTenantSerializer(self._tenant(slug)).data)

    @extend_schema(request=OperatorTenantSerializer, responses=OperatorTenantSerializer, tags=["operators"],
                   summary="Change a tenant's plan")
    def patch(self, request, slug: str):
        tenant = self._tenant(slug)
        body = OperatorTenantSerializer(tenant, data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        if body.validated_data.get("plan"):
            actions.do_change_plan(tenant, body.validated_data["plan"].name, acting=request.auth.actor)
        return Response(OperatorTenantSerializer(tenant).data)
