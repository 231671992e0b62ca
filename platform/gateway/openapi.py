"""The data gateway in the one OpenAPI document (``/api/schema/``, rendered at ``/api/docs/`` and ``/api/redoc/``).

The gateway's views are plain async Django views (see ``asgi.py``), which
drf-spectacular cannot see, so this postprocessing hook adds their
operations. Request bodies are the JSON Schemas of the very msgspec structs
that decode them (``wire.py``), bounds included, so the document cannot drift
from what the gateway accepts. Every operation uses the ``apiKey`` scheme:
``Authorization: Bearer <API key or token>``.
"""

from __future__ import annotations

import msgspec
from tideway_server.controlplane.api.openapi import SCHEME, SECURITY_SCHEME
from tideway_server.gateway import wire

TAG = "data"

_BODIES = [wire.PublishBody, wire.AtomicPublishBody, wire.ReceiveBody, wire.ReceiptsBody, wire.CommitBody, wire.SeekBody, wire.HeartbeatBody,
           wire.RedriveBody, wire.TokenBody]

ERROR = {
    "type": "object",
    "required": ["code", "message", "error_code"],
    "properties": {
        "code": {"type": "string", "description": "stable, for programs (see the table in docs/api.md)"},
        "message": {"type": "string", "description": "for people"},
        "error_code": {"type": "integer"},
        "details": {"type": "object"},
    },
}
MESSAGE = {
    "type": "object",
    "properties": {
        "partition": {"type": "integer"}, "offset": {"type": "integer"}, "timestamp": {"type": "integer"},
        "key": {"type": ["string", "null"]}, "key_base64": {"type": "string"},
        "value": {"type": ["string", "null"]}, "value_base64": {"type": "string"},
        "headers": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}
DELIVERY = {"allOf": [{"$ref": "#/components/schemas/DataMessage"}, {"type": "object", "properties": {
    "receipt": {"type": "string"}, "delivery_count": {"type": "integer"}, "visible_at": {"type": "integer"}}}]}


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _object(**properties) -> dict:
    return {"type": "object", "properties": properties}


def _messages(item: str = "DataMessage") -> dict:
    return _object(messages={"type": "array", "items": _ref(item)})


def _path(name: str, description: str, schema: dict | None = None) -> dict:
    return {"name": name, "in": "path", "required": True, "description": description,
            "schema": schema or {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,100}$"}}


def _query(name: str, description: str, schema: dict) -> dict:
    return {"name": name, "in": "query", "required": False, "description": description, "schema": schema}


QUEUE = _path("name", "the queue (or stream), by the tenant's own name")
GROUP = _path("group", "a consumer group of the queue")
PARTITION = _path("partition", "a partition of the queue", {"type": "integer", "minimum": 0, "maximum": 999999})
ENCODING = _query("encoding", "base64: every key and value as base64", {"type": "string", "enum": ["base64"]})
MAX_MESSAGES = _query("max_messages", "at most this many", {"type": "integer", "minimum": 1, "maximum": 1000})


def _operation(summary: str, description: str, *, parameters=(), body: str | None = None, ok: int = 200,
               answer: dict | None = None, errors=(400, 401, 403, 404, 429)) -> dict:
    operation = {
        "tags": [TAG], "summary": summary, "description": description, "parameters": list(parameters),
        "security": [{SCHEME: []}],
        "responses": {str(ok): {"description": "done", "content": {"application/json": {"schema": answer or {"type": "object"}}}}},
    }
    for status in errors:
        operation["responses"][str(status)] = {"description": "refused (see the error table)",
                                               "content": {"application/json": {"schema": _ref("Error")}}}
    if body is not None:
        operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": _ref(body)}}}
    operation["operationId"] = "data_" + summary.lower().replace(" ", "_").replace(",", "").replace("'", "")
    return operation


def data_paths() -> dict:
    settle = "by receipt (``partition:offset:delivery`` from receive)"
    q = "/api/v1/queues/{name}"
    g = q + "/groups/{group}"
    return {
        "/api/v1/tokens": {"post": _operation(
            "Obtain a token", "A short-lived token for a browser, acting for this key (narrowed to scopes and queues).",
            body="TokenBody", ok=201, answer=_object(token={"type": "string"}, expires_at={"type": "integer"}))},
        "/api/v1/publish": {"post": _operation(
            "Publish to several queues atomically", "Messages for up to 100 queues of the tenant on one cluster (1,000 "
            "messages in all), in one transaction: once answered, every one is stored and readable; refused or failed, "
            "none is. Per queue, where each message went, in order.",
            body="AtomicPublishBody", answer=_object(queues={"type": "array", "items": _object(
                queue={"type": "string"}, messages={"type": "array", "items": _object(
                    partition={"type": "integer"}, offset={"type": "integer"})})}),
            errors=(400, 401, 403, 404, 409, 413, 422, 429, 503))},
        q + "/messages": {
            "post": _operation(
                "Publish messages", "Up to 1,000 messages, answered once every in-sync replica has them; where each one "
                "went, in order. Unkeyed messages spread over partitions; keyed ones go by key.",
                parameters=[QUEUE], body="PublishBody", answer=_object(messages={"type": "array", "items": _object(
                    partition={"type": "integer"}, offset={"type": "integer"})}), errors=(400, 401, 403, 404, 409, 413, 422, 429)),
            "get": _operation("Peek at messages", "Read without consuming or locking.", parameters=[
                QUEUE, MAX_MESSAGES, _query("partition", "only this partition", {"type": "integer", "minimum": 0}),
                _query("offset", "from this offset", {"type": "integer", "minimum": 0}), ENCODING], answer=_messages()),
        },
        q + "/purge": {"post": _operation(
            "Purge a queue", "Delete every message the queue holds now, on every partition (irreversible; what is "
            "published meanwhile stays). Queue groups drop those they had received; stream groups keep their positions.",
            parameters=[QUEUE], answer=_object(purged={"type": "integer"}, partitions={"type": "array", "items": _object(
                partition={"type": "integer"}, log_start_offset={"type": "integer"}, purged={"type": "integer"})}))},
        g + "/receive": {"post": _operation(
            "Receive messages", "Queue model: lock and return up to max_messages (long polling up to wait_seconds).",
            parameters=[QUEUE, GROUP, ENCODING], body="ReceiveBody", answer=_messages("DataDelivery"),
            errors=(400, 401, 403, 404, 409, 429))},
        g + "/ack": {"post": _operation("Acknowledge messages", f"Done with them, {settle}.",
                                        parameters=[QUEUE, GROUP], body="ReceiptsBody", answer=_object(acked={"type": "integer"}))},
        g + "/nack": {"post": _operation("Release messages", f"Redeliver them (after delay_seconds or the queue's backoff), {settle}.",
                                         parameters=[QUEUE, GROUP], body="ReceiptsBody", answer=_object(released={"type": "integer"}))},
        g + "/reject": {"post": _operation("Reject messages", f"Dead-letter them now, {settle}.",
                                           parameters=[QUEUE, GROUP], body="ReceiptsBody", answer=_object(rejected={"type": "integer"}))},
        g + "/extend": {"post": _operation("Extend locks", f"Hold them `seconds` longer from now, {settle}.",
                                           parameters=[QUEUE, GROUP], body="ReceiptsBody")},
        q + "/partitions/{partition}/messages": {"get": _operation(
            "Read a partition", "Stream model: records from offset, from=earliest|latest, or the first at or after timestamp.",
            parameters=[QUEUE, PARTITION, MAX_MESSAGES, ENCODING,
                        _query("offset", "from this offset", {"type": "integer", "minimum": 0}),
                        _query("from", "earliest or latest", {"type": "string", "enum": ["earliest", "latest"]}),
                        _query("timestamp", "ms since the epoch", {"type": "integer", "minimum": 0}),
                        _query("wait_seconds", "long polling", {"type": "integer", "minimum": 0, "maximum": 20})],
            answer=_object(messages={"type": "array", "items": _ref("DataMessage")}, next_offset={"type": "integer"},
                           high_watermark={"type": "integer"}), errors=(400, 401, 403, 404, 416, 429))},
        q + "/partitions/{partition}/offsets": {"get": _operation(
            "Partition offsets", "Earliest and latest offsets; with timestamp, the first offset at or after it.",
            parameters=[QUEUE, PARTITION, _query("timestamp", "ms since the epoch", {"type": "integer", "minimum": 0})])},
        g + "/offsets": {
            "get": _operation("Group offsets", "The group's committed offset and lag per partition.", parameters=[QUEUE, GROUP]),
            "post": _operation("Commit offsets", "Commit positions (the next offset to read, at most the log end).",
                               parameters=[QUEUE, GROUP], body="CommitBody", errors=(400, 401, 403, 404, 416, 429)),
        },
        g + "/seek": {"post": _operation("Seek a group", "Commit the position of earliest, latest, an offset or a time.",
                                         parameters=[QUEUE, GROUP], body="SeekBody", errors=(400, 401, 403, 404, 416, 429))},
        g + "/members": {"post": _operation("Join a group", "Become a member: the answer names the member, its epoch and partitions.",
                                            parameters=[QUEUE, GROUP], body="HeartbeatBody", ok=201)},
        g + "/members/{member_id}": {
            "post": _operation("Heartbeat", "Keep the membership: the answer is the current assignment.",
                               parameters=[QUEUE, GROUP, _path("member_id", "as the join answered")], body="HeartbeatBody"),
            "delete": _operation("Leave a group", "End the membership; its partitions go to the others.",
                                 parameters=[QUEUE, GROUP, _path("member_id", "as the join answered")]),
        },
        q + "/dead-letters": {
            "get": _operation("List dead letters", "Dead letters not redriven yet, oldest first.",
                              parameters=[QUEUE, ENCODING, _query("limit", "at most this many",
                                                                  {"type": "integer", "minimum": 1, "maximum": 1000})],
                              answer=_messages()),
            "delete": _operation("Purge dead letters", "Delete every dead letter.", parameters=[QUEUE]),
        },
        q + "/dead-letters/redrive": {"post": _operation(
            "Redrive dead letters", "Move dead letters back to the queue at a rate (a job; 202 with its status URL).",
            parameters=[QUEUE], body="RedriveBody", ok=202)},
        q + "/dead-letters/redrives/{job_id}": {"get": _operation(
            "Redrive job", "The state of a redrive job and how many it moved.",
            parameters=[QUEUE, _path("job_id", "from the redrive answer", {"type": "string", "pattern": "^[0-9a-f]{32}$"})])},
    }


def data_components() -> dict:
    _schemas, components = msgspec.json.schema_components(_BODIES, ref_template="#/components/schemas/{name}")
    components.update({"Error": ERROR, "DataMessage": MESSAGE, "DataDelivery": DELIVERY})
    return components


def add_data_api(result: dict, generator, request, public) -> dict:
    """drf-spectacular postprocessing hook: the gateway's operations, its bodies and the API-key scheme."""
    result.setdefault("paths", {}).update(data_paths())
    components = result.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for name, schema in data_components().items():
        schemas.setdefault(name, schema)
    components.setdefault("securitySchemes", {})[SCHEME] = SECURITY_SCHEME
    result.setdefault("tags", []).append({"name": TAG, "description": "Publish and consume: queues, streams, dead letters"})
    return result
