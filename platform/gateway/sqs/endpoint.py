"""The SQS endpoint's HTTP entry: ``/sqs/`` on the gateway (docs/sqs.md).

Per request: read the body (bounded), check the SigV4 signature against the credentials of the API key the
access key id names (so the key's scopes, queue patterns, plan limits and revocation apply), parse the action in
either protocol, run it, answer in the same protocol. Every refusal is SQS's error shape with SQS's code; an
unexpected failure is logged and answered as InternalError.
"""

from __future__ import annotations

import logging
import re

from django.conf import settings
from tideway_server.gateway import auth, limits
from tideway_server.gateway.errors import GatewayError
from tideway_server.gateway.metering import meter
from tideway_server.gateway.sqs import actions, protocol, signature
from tideway_server.gateway.sqs.common import Context, as_sqs
from tideway_server.gateway.sqs.protocol import SqsError
from tideway_server.tenants.aws_credentials import prefix_of, secret_access_key

log = logging.getLogger(__name__)

PATH = re.compile(r"^/sqs(/.*)?$")
_CREDENTIAL = re.compile(r"Credential=([^/\s,]+)/")
_SQS_SCOPE = re.compile(rb"Credential=[^/\s,]+/\d{8}/[^/\s,]+/sqs/aws4_request")


def addressed_to_sqs(scope) -> bool:
    """Whether an HTTP request is the SQS endpoint's: under /sqs, or a POST to / signed for SQS. Clients that
    build the endpoint from a host and port alone (kombu's SQS transport, some SDK configs) send to the root."""
    if PATH.match(scope["path"]):
        return True
    if scope["path"] != "/" or scope["method"] != "POST":
        return False
    return any(name == b"authorization" and _SQS_SCOPE.search(value) for name, value in scope["headers"])


async def serve(scope, receive, send) -> None:
    headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
    rid = protocol.request_id()
    from tideway_server.gateway.asgi import read_body  # (asgi imports this module)

    body = await read_body(receive, protocol.MAX_REQUEST_BYTES)
    request_protocol = "json" if "x-amz-target" in headers else "query"
    ctx = None
    try:
        if body is None:
            raise SqsError("InvalidParameterValue", f"the request is larger than {protocol.MAX_REQUEST_BYTES} bytes")
        caller = await _authenticate(scope, headers, body)
        request = protocol.parse(scope["method"], scope.get("query_string", b"").decode("latin-1"), headers, body)
        request_protocol = request.protocol
        if request.action not in _CHARGED_BY_OPERATION:
            await limits.take(caller, requests=1, consuming=request.action == "ReceiveMessage")
        ctx = Context(caller, _endpoint(scope, headers), settings.TIDEWAY_SQS_REGION)
        if request.protocol == "query" and "QueueUrl" not in request.params and scope["path"].count("/") >= 3:
            request.params["QueueUrl"] = ctx.endpoint + scope["path"][len("/sqs"):]  # older SDKs post to the queue's URL
        result = await actions.handle(ctx, request.action, request.params)
        status, out_headers, content = protocol.success(request, result, rid)
    except SqsError as error:
        status, out_headers, content = protocol.failure(request_protocol, error, rid)
    except GatewayError as exc:
        status, out_headers, content = protocol.failure(request_protocol, as_sqs(exc), rid)
    except Exception:
        log.exception("SQS request %s failed", rid)
        status, out_headers, content = protocol.failure(
            request_protocol, SqsError("InternalError", f"the server failed to handle the request {rid}; it was logged"), rid)
    if ctx is not None:  # an authenticated request is the tenant's, whatever its outcome (as on REST)
        meter.count(ctx.queue, bytes_in=len(body or b""), bytes_out=len(content))
    raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in out_headers.items()]
    raw.append((b"content-length", str(len(content)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": content})


# Sends and receives are charged by the gateway's operations themselves (requests and bytes, in one trip).
_CHARGED_BY_OPERATION = {"SendMessage", "SendMessageBatch"}


async def _authenticate(scope, headers: dict[str, str], body: bytes):
    found = _CREDENTIAL.search(headers.get("authorization", ""))
    access_key = found.group(1) if found else ""
    prefix = prefix_of(access_key) if access_key else None
    row = await auth.key_row(prefix) if prefix else None
    secret = None
    if row is not None and row.aws_credentials_salt and not row.revoked:
        secret = secret_access_key(prefix, row.aws_credentials_salt)
    raw_path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
    try:
        signature.verify(scope["method"], raw_path, scope.get("query_string", b"").decode("latin-1"), headers, body,
                         secret_for=lambda key: secret if key == access_key else None, region=settings.TIDEWAY_SQS_REGION)
    except signature.SignatureError as exc:
        error = SqsError(exc.code, exc.message) if exc.code in protocol.ERRORS else SqsError("AccessDenied", exc.message)
        raise error from None
    return row.caller


def _endpoint(scope, headers: dict[str, str]) -> str:
    """This endpoint's URL as the client reached it (queue URLs start with it)."""
    host = headers.get("host") or f"{scope['server'][0]}:{scope['server'][1]}"
    scheme = scope.get("scheme", "http")  # behind a balancer, uvicorn sets it from X-Forwarded-Proto it trusts
    return f"{scheme}://{host}/sqs"
