from rest_framework import serializers
from tideway_server.tenants.choices import PASSWORD_MIN, USERNAME_PATTERN, Role, Scope
from tideway_server.tenants.models import ApiKey, AuditEntry, Membership, Plan, Tenant


class PlanSerializer(serializers.ModelSerializer):
    class Meta:
        model = Plan
        fields = ["name", "display_name", "max_queues", "max_partitions", "max_storage_bytes", "max_publish_bytes_per_s",
                  "max_consume_bytes_per_s", "max_requests_per_s", "max_message_bytes", "max_retention_ms",
                  "monthly_price_cents"]


class TenantSerializer(serializers.ModelSerializer):
    plan = PlanSerializer(read_only=True)
    dedicated_cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = Tenant
        fields = ["slug", "name", "region", "plan", "dedicated_cluster", "created"]


class UsageSerializer(serializers.Serializer):
    queues = serializers.IntegerField()
    partitions = serializers.IntegerField()
    reserved_storage_bytes = serializers.IntegerField()


class ThrottledSerializer(serializers.Serializer):
    requests = serializers.IntegerField()
    publish_bytes = serializers.IntegerField()
    consume_bytes = serializers.IntegerField()


class ThrottlingSerializer(serializers.Serializer):
    """Times each of the plan's rate limits held the tenant back (429 answers and WebSocket throttle frames)."""

    last_minute = ThrottledSerializer()
    last_hour = ThrottledSerializer()
    last_day = ThrottledSerializer()


class CurrentTenantSerializer(serializers.Serializer):
    tenant = TenantSerializer()
    usage = UsageSerializer()
    throttled = ThrottlingSerializer(allow_null=True, help_text="null when the rate limiter (Redis) did not answer")


class ApiKeySerializer(serializers.ModelSerializer):
    scopes = serializers.ListField(child=serializers.ChoiceField(Scope.choices), min_length=1, max_length=3)
    queue_patterns = serializers.ListField(
        child=serializers.RegexField(r"^[A-Za-z0-9._*?\[\]-]{1,100}$"), required=False, max_length=50,
        help_text="fnmatch patterns of queue names the key may touch (default: all)",
    )

    aws_access_key_id = serializers.SerializerMethodField(
        help_text="the access key id of the key's AWS credentials for the SQS endpoint (null: none issued)")

    class Meta:
        model = ApiKey
        fields = ["prefix", "name", "scopes", "queue_patterns", "created", "created_by", "revoked_at", "expires_at",
                  "last_used_at", "aws_access_key_id"]
        read_only_fields = ["prefix", "created", "created_by", "revoked_at", "last_used_at"]
        extra_kwargs = {"name": {"max_length": 100},
                        "expires_at": {"help_text": "refused from this time on (omitted or null: until revoked)"}}

    def get_aws_access_key_id(self, row) -> str | None:
        from tideway_server.tenants.aws_credentials import access_key_id

        return access_key_id(row.prefix) if row.aws_credentials_salt else None


class RotateApiKeySerializer(serializers.Serializer):
    grace_s = serializers.IntegerField(min_value=0, max_value=30 * 86400, default=86400,
                                       help_text="how long the old key keeps working (default a day; 0: stops now)")


class NewApiKeySerializer(ApiKeySerializer):
    key = serializers.CharField(read_only=True, help_text="the whole key; shown only in this answer")

    class Meta(ApiKeySerializer.Meta):
        fields = ["key", *ApiKeySerializer.Meta.fields]


class MemberSerializer(serializers.ModelSerializer):
    username = serializers.RegexField(r"^[\w.@+-]{1,150}$", source="user.username")
    email = serializers.EmailField(source="user.email", required=False, allow_blank=True)
    role = serializers.ChoiceField(Role.choices)

    class Meta:
        model = Membership
        fields = ["username", "email", "role", "created"]
        read_only_fields = ["created"]


class MemberRoleSerializer(serializers.Serializer):
    role = serializers.ChoiceField(Role.choices)


class AuditEntrySerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEntry
        fields = ["id", "created", "actor", "action", "target", "details"]


class SignupSerializer(serializers.Serializer):
    email = serializers.EmailField(max_length=254, help_text="a link to finish signing up is sent there")


class SignupFinishSerializer(serializers.Serializer):
    token = serializers.CharField(max_length=500, help_text="the sign-up link's token (the part after /console/signup/)")
    username = serializers.RegexField(f"^{USERNAME_PATTERN}$", error_messages={
        "invalid": "3 to 150 letters, digits or _ . @ + -"})
    password = serializers.CharField(min_length=PASSWORD_MIN, max_length=128, write_only=True)
    tenant_name = serializers.CharField(max_length=100)


class OperatorTenantSerializer(serializers.ModelSerializer):
    plan = serializers.SlugRelatedField(slug_field="name", queryset=Plan.objects.all(), required=False)
    slug = serializers.SlugField(max_length=50, required=False)

    class Meta:
        model = Tenant
        fields = ["slug", "name", "plan", "region", "created"]
        read_only_fields = ["created"]


class InvitationSerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    email = serializers.EmailField(max_length=254)
    role = serializers.ChoiceField(Role.choices, default="developer")
    invited_by = serializers.CharField(read_only=True)
    expires_at = serializers.DateTimeField(read_only=True)
    link = serializers.CharField(read_only=True, help_text="the signed link to give the invitee (in this answer only)")
    token = serializers.CharField(read_only=True, help_text="the link's signed token, for POST /invitations/accept")


class AcceptInvitationSerializer(serializers.Serializer):
    token = serializers.CharField(max_length=500)
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=128, write_only=True)
    new_account = serializers.BooleanField(default=False, help_text="create this user (the invitee's own user name "
                                           "and password) rather than sign in as an existing one")


class AwsCredentialsSerializer(serializers.Serializer):
    access_key_id = serializers.CharField(read_only=True)
    secret_access_key = serializers.CharField(read_only=True, help_text="shown only in this answer")
    region = serializers.CharField(read_only=True, help_text="the region to sign for (AWS_DEFAULT_REGION)")
    endpoint_url = serializers.CharField(read_only=True, help_text="the SQS endpoint (boto3's endpoint_url)")
