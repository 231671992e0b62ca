"""Every error code of the HTTP APIs and the WebSocket frames, one line each: the one registry.

An error leaves as ``{"code", "message", "error_code", "details"}`` (controlplane/api/errors.py). Here each
``code`` gets its HTTP status, its ``error_code`` (the status unless a more precise number is given: the schema
registry's are Confluent Schema Registry's own, so its clients understand them), whether the same request may
succeed if simply sent again, and when it is answered. ``ActionError`` and ``GatewayError`` take their status
and number from here and refuse a code that is not registered; docs/api.md's error table is checked against
this list (tests/unit/test_error_codes.py), as brokers' wire codes are registered in tideway/protocol/errors.py.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ErrorCode:
    code: str
    status: int
    error_code: int
    retriable: bool
    when: str


CODES: dict[str, ErrorCode] = {}


def _code(code: str, status: int, when: str, *, error_code: int | None = None, retriable: bool = False) -> None:
    assert code not in CODES, f"error code {code!r} registered twice"
    CODES[code] = ErrorCode(code, status, error_code or status, retriable, when)


def lookup(code: str) -> ErrorCode:
    """The registered entry of ``code``; KeyError for a code nobody registered (a bug: register it here)."""
    try:
        return CODES[code]
    except KeyError:
        raise KeyError(f"error code {code!r} is not registered in controlplane/error_codes.py") from None


# code                          status  when
_code("malformed_request", 400, "the body (or a WebSocket frame) is not JSON, or not UTF-8")
_code("invalid_request", 400, "a field is missing, unknown, of the wrong type or out of bounds")
_code("invalid_scopes", 400, "an API key's scopes are not a non-empty subset of the known ones")
_code("invalid_tenant_name", 400, "a tenant's name cannot be made into a valid slug")
_code("invalid_spec", 400, "a cluster's spec (brokers, controllers, provisioner) is not valid")
_code("unknown_plan", 400, "the plan named does not exist")
_code("unknown_schema_subject", 400, "a queue names a schema subject the registry does not hold")
_code("immutable_setting", 400, "the setting cannot change after creation")
_code("partitions_cannot_shrink", 400, "a queue's partitions can only grow")
_code("unauthenticated", 401, "no Authorization header")
_code("invalid_credentials", 401, "the key or token is malformed, wrong, expired or revoked")
_code("forbidden", 403, "the key lacks the scope, or its queue patterns do not cover the queue")
_code("quota_exceeded", 403, "the plan does not allow it (details: quota, limit, requested, and the field it bounds)", error_code=40301)
_code("queue_not_found", 404, "the queue does not exist (or belongs to another tenant: the same answer)")
_code("group_not_found", 404, "the consumer group has no recorded position or lag")
_code("not_found", 404, "any other missing thing: an endpoint, a partition, a redrive job, a cluster, a key")
_code("unknown_user", 404, "the user named does not exist")
_code("alert_not_found", 404, "the alert rule does not exist")
_code("channel_not_found", 404, "the notification channel does not exist")
_code("invoice_not_found", 404, "the invoice does not exist")
_code("subject_not_found", 404, "schema registry: the subject does not exist", error_code=40401)
_code("version_not_found", 404, "schema registry: the subject has no such version", error_code=40402)
_code("schema_not_found", 404, "schema registry: no schema has this id", error_code=40403)
_code("subject_not_soft_deleted", 404, "schema registry: a subject is deleted for good before it was deleted",
      error_code=40405)
_code("version_not_soft_deleted", 404, "schema registry: a version is deleted for good before it was deleted",
      error_code=40407)
_code("subject_level_not_configured", 404, "schema registry: the subject has no compatibility level of its own",
      error_code=40408)
_code("method_not_allowed", 405, "the endpoint does not take this method")
_code("not_acceptable", 406, "the Accept header asks for a type the endpoint does not answer in")
_code("queue_exists", 409, "the queue's name is taken")
_code("tenant_exists", 409, "the tenant's name is taken")
_code("cluster_exists", 409, "the cluster's name is taken")
_code("member_exists", 409, "the user is a member already")
_code("by_invitation", 409, "members join by accepting an invitation (POST /api/v1/invitations/); nobody is added by someone else")
_code("username_taken", 409, "the user name is taken")
_code("last_owner", 409, "the change would leave the tenant without an owner")
_code("conflict", 409, "the change conflicts with the object's state (an alert rule, a cluster)")
_code("queue_busy", 409, "the queue is being created, changed or deleted", retriable=True)
_code("group_busy", 409, "the group's offsets cannot be reset while it has members")
_code("wrong_mode", 409, "a queue-model call on a stream (or the reverse)")
_code("duplicate_message", 409, "a dedup id was seen in the window (or twice in one request)")
_code("publish_in_progress", 409, "a message with this dedup id is still being published", retriable=True)
_code("receipt_expired", 409, "the receipt no longer holds the message (its visibility timeout passed)")
_code("incompatible_schema", 409, "schema registry: the schema breaks the subject's compatibility level")
_code("message_too_large", 413, "one message over the queue's max_message_bytes")
_code("request_too_large", 413, "a body over 16 MiB")
_code("unsupported_media_type", 415, "the body's Content-Type is not one the endpoint reads")
_code("offset_out_of_range", 416, "a read, commit or seek outside the partition's log")
_code("schema_violation", 422, "a message does not match the queue's schema subject")
_code("invalid_schema", 422, "schema registry: the schema does not parse", error_code=42201)
_code("invalid_version", 422, "schema registry: a version is not 1 to 2^31-1 or \"latest\"", error_code=42202)
_code("invalid_compatibility_level", 422, "schema registry: not a compatibility level", error_code=42203)
_code("throttled", 429, "the plan's request or byte rate; Retry-After says when; details.limit names it",
      retriable=True)
_code("internal_error", 500, "a bug; it was logged", error_code=50001)
_code("cluster_error", 502, "the broker cluster refused a management change", error_code=50201)
_code("unavailable", 503, "a service the call needs (Redis, a broker) did not answer", retriable=True)
_code("cluster_unavailable", 503, "the queue's cluster cannot be reached", retriable=True)
_code("no_capacity", 503, "no cluster has room for the queue", retriable=True)
_code("publish_failed", 503, "some messages of the request were not stored (details.results)", retriable=True)
