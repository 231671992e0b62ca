"""A bare Kafka connection for tests that must send exactly one request of a chosen API and version: kio encodes
and decodes (Kafka's own message definitions), nothing else in between."""

from __future__ import annotations

import io
import socket
import struct
import types

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer


class RawKafka:
    def __init__(self, address: str, key: str | None = None) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=15)
        self.correlation_id = 0
        if key is not None:
            self.authenticate(key)

    def authenticate(self, key: str):
        handshake = self.request(17, 1, mechanism="PLAIN")
        assert handshake.error_code == 0, handshake
        return self.request(36, 2, auth_bytes=b"\x00tideway\x00" + key.encode())

    def request(self, api_key: int, version: int, **fields):
        """Send one request (``fields``: the version's dataclass fields; nested ones as dataclasses of it) and read
        its answer; ConnectionError when the broker closes the connection instead."""
        request_type = load_request_schema(api_key, version)
        self.correlation_id += 1
        flexible = request_type.__flexible__
        header = struct.pack(">hhih", api_key, version, self.correlation_id, 4) + b"test" + (b"\x00" if flexible else b"")
        body = io.BytesIO()
        entity_writer(request_type)(body, request_type(**fields))
        payload = header + body.getvalue()
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        answer = self._read(struct.unpack(">i", self._read(4))[0])
        (correlation_id,) = struct.unpack_from(">i", answer)
        assert correlation_id == self.correlation_id
        response_type = load_response_schema(api_key, version)
        offset = 4 + (1 if response_type.__header_schema__.__flexible__ else 0)
        return entity_reader(response_type)(answer[offset:], 0)[0]

    def _read(self, count: int) -> bytes:
        out = b""
        while len(out) < count:
            chunk = self.sock.recv(count - len(out))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            out += chunk
        return out

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawKafka:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def nested(cls, *path: str):
    """The dataclass of the items of ``cls``'s field ``path[0]``, then of theirs, and so on."""
    for name in path:
        field_type = cls.__dataclass_fields__[name].type
        if type(field_type) is types.UnionType:  # tuple[...] | None: the tuple
            field_type = next(arg for arg in field_type.__args__ if arg is not type(None))
        cls = field_type.__args__[0]
    return cls
