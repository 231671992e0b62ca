"""Confluent Schema Registry compatible routes, scoped to the caller's tenant.

Paths, bodies and answers follow Confluent's REST API (``subjects``,
``schemas/ids``, ``config``, ``compatibility``), so its clients work with
base URL ``<server>/api/v1/registry``. Reads need any scope, changes the
``manage`` scope.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView
from tideway_server.controlplane.api.permissions import ANY_SCOPE
from tideway_server.controlplane.errors import ActionError
from tideway_server.registry import actions
from tideway_server.registry.actions import (
    live_versions,
    schema_not_found,
    subject_not_found,
    version_not_found,
)
from tideway_server.registry.models import Schema, SubjectVersion

TAG = ["schema registry"]
MAX_VERSION = 2**31 - 1


class SchemaBody(serializers.Serializer):
    schema = serializers.CharField(help_text="the schema text (Avro or JSON Schema as a JSON string, or .proto text)")
    schemaType = serializers.ChoiceField(["AVRO", "JSON", "PROTOBUF"], default="AVRO", required=False)  # noqa: N815 - Confluent's name
    references = serializers.ListField(child=serializers.DictField(), required=False, default=list)


class LevelBody(serializers.Serializer):
    compatibility = serializers.CharField(help_text="BACKWARD, BACKWARD_TRANSITIVE, FORWARD, FORWARD_TRANSITIVE, FULL, FULL_TRANSITIVE or NONE")


def _flag(request, name: str) -> bool:
    return str(request.query_params.get(name, "false")).lower() == "true"


def _schema_body(request) -> dict:
    body = SchemaBody(data=request.data if isinstance(request.data, dict) else {})
    if not body.is_valid():
        raise ActionError("invalid_schema", "the body must be {\"schema\": \"...\", \"schemaType\": ...}", details={"fields": body.errors})
    return body.validated_data


def _version_answer(row: SubjectVersion) -> dict:
    answer = {"subject": row.subject, "version": row.version, "id": row.schema_id, "schema": row.schema.text}
    if row.schema.schema_type != "AVRO":
        answer["schemaType"] = row.schema.schema_type
    if row.schema.references:
        answer["references"] = row.schema.references
    return answer


def _find_version(request, subject: str, version: str, *, include_deleted: bool | None = None) -> SubjectVersion:
    tenant = request.auth.tenant
    if include_deleted is None:
        include_deleted = _flag(request, "deleted")
    rows = SubjectVersion.objects.filter(tenant=tenant, subject=subject).select_related("schema")
    if not include_deleted:
        rows = rows.filter(deleted=False)
    if version in ("latest", "-1"):
        row = rows.order_by("-version").first()
        if row is None:
            raise subject_not_found(subject)
        return row
    try:
        number = int(version)
    except ValueError:
        number = 0
    if not 1 <= number <= MAX_VERSION:
        raise ActionError("invalid_version", f"The specified version '{version}' is not a valid version id. Allowed "
                          "values are between [1, 2^31-1] and the string \"latest\"")
    row = rows.filter(version=number).first()
    if row is None:
        if not SubjectVersion.objects.filter(tenant=tenant, subject=subject).exists():
            raise subject_not_found(subject)
        raise version_not_found(subject, number)
    return row


@extend_schema(tags=TAG)
class SchemaTypesView(APIView):
    @extend_schema(responses={200: serializers.ListField(child=serializers.CharField())})
    def get(self, request):
        return Response(["AVRO", "JSON", "PROTOBUF"])


@extend_schema(tags=TAG)
class SubjectsView(APIView):
    @extend_schema(parameters=[OpenApiParameter("deleted", bool)], responses={200: serializers.ListField(child=serializers.CharField())})
    def get(self, request):
        rows = SubjectVersion.objects.filter(tenant=request.auth.tenant)
        if not _flag(request, "deleted"):
            rows = rows.filter(deleted=False)
        return Response(sorted(set(rows.values_list("subject", flat=True))))


@extend_schema(tags=TAG)
class SubjectView(APIView):
    @extend_schema(request=SchemaBody, responses={200: dict}, summary="Is this schema registered under the subject?")
    def post(self, request, subject: str):
        body = _schema_body(request)
        actions.parse_or_raise(body["schemaType"], body["schema"])
        digest = actions.fingerprint(body["schemaType"], body["schema"], body["references"])
        rows = SubjectVersion.objects.filter(tenant=request.auth.tenant, subject=subject).select_related("schema")
        if not _flag(request, "deleted"):
            rows = rows.filter(deleted=False)
        if not rows.exists():
            raise subject_not_found(subject)
        row = rows.filter(schema__fingerprint=digest).order_by("-version").first()
        if row is None:
            raise schema_not_found()
        return Response(_version_answer(row))

    @extend_schema(parameters=[OpenApiParameter("permanent", bool)], responses={200: serializers.ListField(child=serializers.IntegerField())})
    def delete(self, request, subject: str):
        return Response(actions.do_delete_subject(request.auth.tenant, subject, permanent=_flag(request, "permanent"),
                                                  acting=request.auth.actor))

    # Lookup is a POST that changes nothing: any scope may do it.
    required_scopes = {"POST": ANY_SCOPE}


@extend_schema(tags=TAG)
class VersionsView(APIView):
    @extend_schema(parameters=[OpenApiParameter("deleted", bool)], responses={200: serializers.ListField(child=serializers.IntegerField())})
    def get(self, request, subject: str):
        rows = SubjectVersion.objects.filter(tenant=request.auth.tenant, subject=subject)
        if not _flag(request, "deleted"):
            rows = rows.filter(deleted=False)
        numbers = list(rows.order_by("version").values_list("version", flat=True))
        if not numbers:
            raise subject_not_found(subject)
        return Response(numbers)

    @extend_schema(request=SchemaBody, responses={200: inline_serializer("RegisteredId", {"id": serializers.IntegerField()})})
    def post(self, request, subject: str):
        body = _schema_body(request)
        row = actions.do_register(request.auth.tenant, subject, text=body["schema"], schema_type=body["schemaType"],
                                  references=body["references"], acting=request.auth.actor)
        return Response({"id": row.schema_id})


@extend_schema(tags=TAG)
class VersionView(APIView):
    @extend_schema(parameters=[OpenApiParameter("deleted", bool)], responses={200: dict})
    def get(self, request, subject: str, version: str):
        return Response(_version_answer(_find_version(request, subject, version)))

    @extend_schema(parameters=[OpenApiParameter("permanent", bool)], responses={200: serializers.IntegerField()})
    def delete(self, request, subject: str, version: str):
        permanent = _flag(request, "permanent")
        # A permanent delete acts on a version that was soft-deleted first.
        row = _find_version(request, subject, version, include_deleted=permanent or None)
        return Response(actions.do_delete_version(request.auth.tenant, subject, row, permanent=permanent, acting=request.auth.actor))


@extend_schema(tags=TAG)
class VersionSchemaView(APIView):
    @extend_schema(responses={200: dict})
    def get(self, request, subject: str, version: str):
        row = _find_version(request, subject, version)
        return _raw_schema(row.schema)


def _raw_schema(schema: Schema) -> Response:
    import json

    if schema.schema_type == "PROTOBUF":
        return Response(schema.text)
    return Response(json.loads(schema.text))


def _schema_by_id(request, schema_id: int) -> Schema:
    schema = Schema.objects.filter(tenant=request.auth.tenant, pk=schema_id).first()
    if schema is None:
        raise schema_not_found()
    return schema


@extend_schema(tags=TAG)
class SchemaByIdView(APIView):
    @extend_schema(parameters=[OpenApiParameter("subject", str)], responses={200: dict})
    def get(self, request, schema_id: int):
        schema = _schema_by_id(request, schema_id)
        answer = {"schema": schema.text}
        if schema.schema_type != "AVRO":
            answer["schemaType"] = schema.schema_type
        if schema.references:
            answer["references"] = schema.references
        return Response(answer)


@extend_schema(tags=TAG)
class SchemaByIdRawView(APIView):
    @extend_schema(responses={200: dict})
    def get(self, request, schema_id: int):
        return _raw_schema(_schema_by_id(request, schema_id))


@extend_schema(tags=TAG)
class SchemaByIdSubjectsView(APIView):
    @extend_schema(responses={200: serializers.ListField(child=serializers.CharField())})
    def get(self, request, schema_id: int):
        schema = _schema_by_id(request, schema_id)
        return Response(sorted(set(schema.versions.filter(deleted=False).values_list("subject", flat=True))))


@extend_schema(tags=TAG)
class SchemaByIdVersionsView(APIView):
    @extend_schema(responses={200: dict})
    def get(self, request, schema_id: int):
        schema = _schema_by_id(request, schema_id)
        rows = schema.versions.filter(deleted=False).order_by("subject", "version")
        return Response([{"subject": r.subject, "version": r.version} for r in rows])


@extend_schema(tags=TAG)
class GlobalConfigView(APIView):
    @extend_schema(responses={200: inline_serializer("CompatibilityLevel", {"compatibilityLevel": serializers.CharField()})})
    def get(self, request):
        return Response({"compatibilityLevel": actions.level_for(request.auth.tenant, "")})

    @extend_schema(request=LevelBody, responses={200: LevelBody})
    def put(self, request):
        level = actions.do_set_level(request.auth.tenant, "", _level_body(request), acting=request.auth.actor)
        return Response({"compatibility": level})

    @extend_schema(responses={200: LevelBody})
    def delete(self, request):
        return Response({"compatibility": actions.do_delete_level(request.auth.tenant, "", acting=request.auth.actor)})


def _level_body(request) -> str:
    data = request.data if isinstance(request.data, dict) else {}
    level = data.get("compatibility")
    if not isinstance(level, str):
        raise ActionError("invalid_compatibility_level", "the body must be {\"compatibility\": LEVEL}")
    return level.upper()


@extend_schema(tags=TAG)
class SubjectConfigView(APIView):
    @extend_schema(parameters=[OpenApiParameter("defaultToGlobal", bool)],
                   responses={200: inline_serializer("SubjectCompatibilityLevel", {"compatibilityLevel": serializers.CharField()})})
    def get(self, request, subject: str):
        from tideway_server.registry.models import CompatibilityConfig

        row = CompatibilityConfig.objects.filter(tenant=request.auth.tenant, subject=subject).first()
        if row is None:
            if _flag(request, "defaultToGlobal"):
                return Response({"compatibilityLevel": actions.level_for(request.auth.tenant, "")})
            raise ActionError("subject_level_not_configured", f"Subject '{subject}' does not have subject-level "
                              "compatibility configured")
        return Response({"compatibilityLevel": row.level})

    @extend_schema(request=LevelBody, responses={200: LevelBody})
    def put(self, request, subject: str):
        level = actions.do_set_level(request.auth.tenant, subject, _level_body(request), acting=request.auth.actor)
        return Response({"compatibility": level})

    @extend_schema(responses={200: LevelBody})
    def delete(self, request, subject: str):
        return Response({"compatibility": actions.do_delete_level(request.auth.tenant, subject, acting=request.auth.actor)})


@extend_schema(tags=TAG)
class CompatibilityView(APIView):
    """Would this schema be accepted? Against one version, or (no version) the versions the level names."""

    required_scopes = {"POST": ANY_SCOPE}  # a check changes nothing

    @extend_schema(request=SchemaBody, parameters=[OpenApiParameter("verbose", bool)],
                   responses={200: inline_serializer("Compatible", {"is_compatible": serializers.BooleanField()})})
    def post(self, request, subject: str, version: str | None = None):
        body = _schema_body(request)
        parsed = actions.parse_or_raise(body["schemaType"], body["schema"])
        level = actions.level_for(request.auth.tenant, subject)
        if version is None:
            against = list(live_versions(request.auth.tenant, subject))
        else:
            against = [_find_version(request, subject, version)]
            level = level.replace("_TRANSITIVE", "")
        problems = actions.incompatibilities(request.auth.tenant, subject, body["schemaType"], parsed, against, level)
        answer = {"is_compatible": not problems}
        if _flag(request, "verbose"):
            answer["messages"] = problems
        return Response(answer)
