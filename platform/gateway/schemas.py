"""Schema validation of published messages, for queues that require a subject.

Two encodings, chosen per queue:

* ``confluent``: Confluent's wire format, a zero magic byte, the 4-byte
  big-endian schema id, then the payload. The id must be a (not deleted)
  version of the queue's subject; Avro payloads must decode completely with
  that schema, JSON payloads must validate against it. Protobuf payloads are
  checked for the id only (``decode`` reads them for the console, with
  ``registry.protobuf_reader``).
* ``json``: the value is JSON text, validated against the subject's latest
  version (JSON Schema, or Avro's JSON form).

A subject's versions are read once per ``SCHEMA_CACHE_SECONDS`` and compiled
once, not per message.
"""

from __future__ import annotations

import io
import json
import time
from dataclasses import dataclass, field

import fastavro
import jsonschema
from asgiref.sync import sync_to_async
from tideway_server.gateway.catalog import QueueInfo
from tideway_server.gateway.errors import GatewayError

SCHEMA_CACHE_SECONDS = 10.0


@dataclass
class _Compiled:
    schema_type: str
    check: object  # callable(decoded value) raising on a violation, or None (Protobuf: id only)
    reader: object = None  # Protobuf: a ProtobufReader for showing messages (None when the schema cannot be loaded)


@dataclass
class SubjectSchemas:
    subject: str
    by_id: dict[int, _Compiled] = field(default_factory=dict)
    latest: _Compiled | None = None


def _compile(schema_type: str, text: str) -> _Compiled:
    if schema_type == "AVRO":
        parsed = fastavro.parse_schema(json.loads(text))
        return _Compiled("AVRO", parsed)
    if schema_type == "JSON":
        schema = json.loads(text)
        validator_class = jsonschema.validators.validator_for(schema)
        return _Compiled("JSON", validator_class(schema))
    if schema_type == "PROTOBUF":
        from tideway_server.registry.protobuf_reader import ProtobufReader

        try:
            return _Compiled("PROTOBUF", None, ProtobufReader(text))
        except Exception:  # noqa: BLE001 - e.g. references to other subjects: ids still check, messages show as bytes
            return _Compiled("PROTOBUF", None)
    return _Compiled(schema_type, None)


def _load(tenant_id: int, subject: str) -> SubjectSchemas:
    from django.db import close_old_connections
    from tideway_server.registry.models import SubjectVersion

    close_old_connections()  # the gateway bypasses Django's per-request connection handling
    found = SubjectSchemas(subject)
    rows = SubjectVersion.objects.select_related("schema").filter(tenant_id=tenant_id, subject=subject, deleted=False).order_by("version")
    for row in rows:
        compiled = found.by_id.get(row.schema_id) or _compile(row.schema.schema_type, row.schema.text)
        found.by_id[row.schema_id] = compiled
        found.latest = compiled
    return found


_cache: dict[tuple[int, str], tuple[float, SubjectSchemas]] = {}


async def _schemas(queue: QueueInfo) -> SubjectSchemas:
    key = (queue.tenant_id, queue.schema_subject)
    now = time.monotonic()
    cached = _cache.get(key)
    if cached is not None and cached[0] > now:
        return cached[1]
    found = await sync_to_async(_load)(queue.tenant_id, queue.schema_subject)
    _cache[key] = (now + SCHEMA_CACHE_SECONDS, found)
    return found


def _violation(index: int, message: str, queue: QueueInfo) -> GatewayError:
    return GatewayError("schema_violation", f"message {index} does not match subject {queue.schema_subject!r}: {message}", details={"index": index, "subject": queue.schema_subject})


def _check_json(compiled: _Compiled, document) -> None:
    if compiled.schema_type == "AVRO":
        fastavro.validation.validate(document, compiled.check, raise_errors=True)
    elif compiled.schema_type == "JSON":
        compiled.check.validate(document)


async def validate(queue: QueueInfo, values: list[bytes | None]) -> None:
    """Raise 422 ``schema_violation`` naming the first message that does not match the queue's subject."""
    if not queue.schema_subject:
        return
    schemas = await _schemas(queue)
    if schemas.latest is None:
        raise GatewayError("schema_violation", f"subject {queue.schema_subject!r} has no schema version yet",
                           details={"subject": queue.schema_subject})
    for index, value in enumerate(values):
        if value is None:
            raise _violation(index, "a message without a value cannot match a schema", queue)
        try:
            if queue.schema_encoding == "json":
                _check_json(schemas.latest, json.loads(value))
                continue
            if len(value) < 5 or value[0] != 0:
                raise ValueError("not in Confluent's wire format (magic byte 0, 4-byte schema id, payload)")
            schema_id = int.from_bytes(value[1:5], "big")
            compiled = schemas.by_id.get(schema_id)
            if compiled is None:
                raise ValueError(f"schema id {schema_id} is not a version of the subject")
            payload = value[5:]
            if compiled.schema_type == "AVRO":
                reader = io.BytesIO(payload)
                fastavro.schemaless_reader(reader, compiled.check)
                if reader.tell() != len(payload):
                    raise ValueError(f"{len(payload) - reader.tell()} bytes left over after the Avro record")
            elif compiled.schema_type == "JSON":
                _check_json(compiled, json.loads(payload))
        except GatewayError:
            raise
        except jsonschema.ValidationError as exc:
            raise _violation(index, exc.message, queue) from None
        except Exception as exc:  # fastavro and json raise many kinds; each means "does not match"
            raise _violation(index, str(exc) or type(exc).__name__, queue) from None


async def subject_schemas(queue: QueueInfo) -> SubjectSchemas | None:
    """The queue's subject, compiled (cached as for validation); None when the queue requires none."""
    return await _schemas(queue) if queue.schema_subject else None


def decode(queue: QueueInfo, schemas: SubjectSchemas | None, value: bytes | None) -> tuple[object, str] | None:
    """A stored value as data, for people (the console's browser): (decoded, how), or None when it is not
    decodable. The same wire rules as ``validate``: Confluent's format with a version of the subject, or JSON."""
    if value is None:
        return None
    try:
        if schemas is not None and queue.schema_encoding != "json" and len(value) >= 5 and value[0] == 0:
            schema_id = int.from_bytes(value[1:5], "big")
            compiled = schemas.by_id.get(schema_id)
            if compiled is not None and compiled.schema_type == "AVRO":
                return fastavro.schemaless_reader(io.BytesIO(value[5:]), compiled.check), f"Avro, schema id {schema_id}"
            if compiled is not None and compiled.schema_type == "JSON":
                return json.loads(value[5:]), f"JSON, schema id {schema_id}"
            if compiled is not None and compiled.reader is not None:
                decoded, type_name = compiled.reader.decode(value[5:])
                return decoded, f"Protobuf {type_name}, schema id {schema_id}"
            return None
        return json.loads(value), "JSON"
    except Exception:  # noqa: BLE001 - not decodable: shown as text or hex
        return None
