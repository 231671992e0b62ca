"""Every change to the schema registry: one ``do_*`` function each, with an audit row.

Errors carry Confluent's error codes (40401 subject not found, 40402 version
not found, 40403 schema not found, 409 incompatible, 42201 invalid schema,
42202 invalid version, 42203 invalid compatibility level), so its clients
report them as they would against Confluent's registry.
"""

from __future__ import annotations

import hashlib

from django.db import IntegrityError, transaction
from django.db.models import Max
from tideway_server.controlplane.errors import ActionError
from tideway_server.registry import compatibility
from tideway_server.registry.models import CompatibilityConfig, Schema, SubjectVersion
from tideway_server.tenants import audit

DEFAULT_LEVEL = "BACKWARD"  # Confluent's default


def subject_not_found(subject: str) -> ActionError:
    return ActionError("subject_not_found", f"Subject '{subject}' not found.")


def version_not_found(subject: str, version) -> ActionError:
    return ActionError("version_not_found", f"Version {version} not found for subject '{subject}'.")


def schema_not_found() -> ActionError:
    return ActionError("schema_not_found", "Schema not found")


def parse_or_raise(schema_type: str, text: str):
    if schema_type not in compatibility.SCHEMA_TYPES:
        raise ActionError("invalid_schema", f"unknown schema type {schema_type!r}; use AVRO, JSON or PROTOBUF")
    if not isinstance(text, str) or not text:
        raise ActionError("invalid_schema", "the schema is missing or empty")
    try:
        return compatibility.parse(schema_type, text)
    except compatibility.InvalidSchema as exc:
        raise ActionError("invalid_schema", str(exc)) from None


def level_for(tenant, subject: str) -> str:
    levels = dict(CompatibilityConfig.objects.filter(tenant=tenant, subject__in=[subject, ""]).values_list("subject", "level"))
    return levels.get(subject) or levels.get("") or DEFAULT_LEVEL


def fingerprint(schema_type: str, text: str, references: list) -> str:
    return hashlib.sha256(f"{schema_type}\n{text}\n{references!r}".encode()).hexdigest()


def live_versions(tenant, subject: str):
    return SubjectVersion.objects.filter(tenant=tenant, subject=subject, deleted=False).select_related("schema").order_by("version")


def incompatibilities(tenant, subject: str, schema_type: str, parsed, against: list[SubjectVersion], level: str) -> list[str]:
    previous = [compatibility.parse(v.schema.schema_type, v.schema.text) for v in against if v.schema.schema_type == schema_type]
    if any(v.schema.schema_type != schema_type for v in against) and level != "NONE":
        return [f"the schema type changed to {schema_type}"]
    return compatibility.check(schema_type, level, parsed, previous)


def do_register(tenant, subject: str, *, text: str, schema_type: str = "AVRO", references: list | None = None,
                acting: str) -> SubjectVersion:
    """Register a schema under a subject (or return the version that already has it)."""
    references = references or []
    parsed = parse_or_raise(schema_type, text)
    digest = fingerprint(schema_type, text, references)
    with transaction.atomic():
        versions = list(live_versions(tenant, subject))
        for existing in versions:
            if existing.schema.fingerprint == digest:
                return existing
        level = level_for(tenant, subject)
        problems = incompatibilities(tenant, subject, schema_type, parsed, versions, level)
        if problems:
            raise ActionError("incompatible_schema",
                              f"Schema being registered is incompatible with an earlier schema for subject "
                              f"'{subject}' ({level}): {'; '.join(problems)}",
                              details={"level": level, "messages": problems})
        schema, _ = Schema.objects.get_or_create(tenant=tenant, fingerprint=digest,
                                                 defaults={"schema_type": schema_type, "text": text, "references": references})
        latest = SubjectVersion.objects.filter(tenant=tenant, subject=subject).aggregate(v=Max("version"))["v"] or 0
        try:
            version = SubjectVersion.objects.create(tenant=tenant, subject=subject, version=latest + 1, schema=schema)
        except IntegrityError:
            raise ActionError("conflict", "another registration of this subject happened at the same time; retry") from None
        audit.record(tenant, acting, "schema.register", subject, version=version.version, id=schema.pk, type=schema_type)
    return version


def do_delete_version(tenant, subject: str, version: SubjectVersion, *, permanent: bool, acting: str) -> int:
    with transaction.atomic():
        if permanent:
            if not version.deleted:
                raise ActionError("version_not_soft_deleted", f"Subject '{subject}' Version {version.version} was not deleted "
                                  "first before being permanently deleted")
            version.delete()
        else:
            version.deleted = True
            version.save(update_fields=["deleted"])
        audit.record(tenant, acting, "schema.delete_version", subject, version=version.version, permanent=permanent)
    return version.version


def do_delete_subject(tenant, subject: str, *, permanent: bool, acting: str) -> list[int]:
    with transaction.atomic():
        rows = SubjectVersion.objects.filter(tenant=tenant, subject=subject)
        if not rows.exists():
            raise subject_not_found(subject)
        if permanent:
            if rows.filter(deleted=False).exists():
                raise ActionError("subject_not_soft_deleted", f"Subject '{subject}' was not deleted first before being "
                                  "permanently deleted")
            numbers = sorted(rows.values_list("version", flat=True))
            rows.delete()
            CompatibilityConfig.objects.filter(tenant=tenant, subject=subject).delete()
        else:
            numbers = sorted(rows.filter(deleted=False).values_list("version", flat=True))
            if not numbers:
                raise subject_not_found(subject)
            rows.update(deleted=True)
        audit.record(tenant, acting, "schema.delete_subject", subject, versions=numbers, permanent=permanent)
    return numbers


def do_set_level(tenant, subject: str, level: str, *, acting: str) -> str:
    if level not in compatibility.LEVELS:
        raise ActionError("invalid_compatibility_level", f"Invalid compatibility level {level!r}; use one of "
                          f"{', '.join(compatibility.LEVELS)}")
    with transaction.atomic():
        CompatibilityConfig.objects.update_or_create(tenant=tenant, subject=subject, defaults={"level": level})
        audit.record(tenant, acting, "schema.set_compatibility", subject or "(global)", level=level)
    return level


def do_delete_level(tenant, subject: str, *, acting: str) -> str:
    with transaction.atomic():
        old = level_for(tenant, subject)
        deleted, _ = CompatibilityConfig.objects.filter(tenant=tenant, subject=subject).delete()
        if subject and not deleted:
            raise ActionError("subject_level_not_configured", f"Subject '{subject}' does not have subject-level "
                              "compatibility configured")
        audit.record(tenant, acting, "schema.delete_compatibility", subject or "(global)", level=old)
    return old
