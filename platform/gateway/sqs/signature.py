"""AWS Signature Version 4, checked the way AWS checks it, for requests to the SQS endpoint.

A client signs a canonical form of its request (method, path, query, the headers it names, the body's SHA-256)
with a key derived from its secret, the date, the region and the service; the server rebuilds the same form
from what arrived and compares. Nothing here knows about tenants: ``verify`` is given the secret of the access
key id the request names (or None when that id is unknown) by its caller.

Header-signed requests only (``Authorization: AWS4-HMAC-SHA256 ...``), as every SDK sends them; presigned URLs
(``X-Amz-Signature`` in the query) are refused with a clear error. The signing time (``X-Amz-Date``) must be
within 15 minutes of the server's, as AWS requires.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote, unquote

ALGORITHM = "AWS4-HMAC-SHA256"
SERVICE = "sqs"
MAX_SKEW = datetime.timedelta(minutes=15)
_AUTHORIZATION = re.compile(
    r"^AWS4-HMAC-SHA256\s+Credential=(?P<credential>[^,\s]+)\s*,\s*SignedHeaders=(?P<signed>[^,\s]+)\s*,"
    r"\s*Signature=(?P<signature>[0-9a-f]{64})\s*$")
_SPACES = re.compile(r"\s+")


class SignatureError(Exception):
    """Why a request's signature is refused: an SQS error code (``code``), its HTTP status and a message."""

    def __init__(self, code: str, message: str, status: int = 403) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


@dataclass(frozen=True)
class Signed:
    """What a valid signature established."""

    access_key_id: str
    region: str
    date: str  # YYYYMMDD of the credential scope


def verify(method: str, raw_path: str, query: str, headers: dict[str, str], body: bytes, *,
           secret_for: Callable[[str], str | None], region: str, now: datetime.datetime | None = None) -> Signed:
    """Check the request's SigV4 signature. ``headers``: names in lower case; ``raw_path`` and ``query`` as sent
    (percent-encoded); ``secret_for(access_key_id)``: its secret, or None if unknown. Raises SignatureError."""
    authorization = headers.get("authorization", "")
    if not authorization:
        if "X-Amz-Signature=" in query:
            raise SignatureError("AccessDenied", "presigned URLs are not accepted here: sign the request's headers")
        raise SignatureError("MissingAuthenticationToken", "the request is not signed: send AWS Signature Version 4 "
                             "with the access key id and secret made for your API key")
    found = _AUTHORIZATION.match(authorization)
    if found is None:
        if not authorization.startswith(ALGORITHM):
            raise SignatureError("IncompleteSignature", f"only {ALGORITHM} signatures are accepted", status=400)
        raise SignatureError("IncompleteSignature", "the Authorization header needs Credential, SignedHeaders and "
                             "Signature", status=400)
    scope = found["credential"].split("/")
    if len(scope) != 5 or scope[4] != "aws4_request":
        raise SignatureError("IncompleteSignature", "the credential must be ACCESS_KEY_ID/DATE/REGION/sqs/aws4_request",
                             status=400)
    access_key_id, date, scope_region, service, _ = scope
    if service != SERVICE:
        raise SignatureError("SignatureDoesNotMatch", f"the credential is scoped to service {service!r}, not {SERVICE!r}")
    if scope_region != region:
        raise SignatureError("SignatureDoesNotMatch", f"the credential is scoped to region {scope_region!r}; this "
                             f"endpoint's region is {region!r}")
    signed_names = found["signed"].split(";")
    if "host" not in signed_names:
        raise SignatureError("SignatureDoesNotMatch", "the Host header must be signed")
    stamp = headers.get("x-amz-date", "")
    try:
        signed_at = _signing_time(stamp)
    except ValueError:
        raise SignatureError("IncompleteSignature", "X-Amz-Date (YYYYMMDDTHHMMSSZ) is missing or malformed",
                             status=400) from None
    if stamp[:8] != date:
        raise SignatureError("SignatureDoesNotMatch", "the credential's date is not X-Amz-Date's")
    now = now or datetime.datetime.now(datetime.UTC)
    if abs(now - signed_at) > MAX_SKEW:
        raise SignatureError("RequestExpired", f"the request was signed at {stamp}, more than 15 minutes from the "
                             f"server's time {now:%Y%m%dT%H%M%SZ}", status=400)
    secret = secret_for(access_key_id)
    if secret is None:
        raise SignatureError("InvalidClientTokenId", "the access key id is not known (or its API key was revoked)")
    missing = [name for name in signed_names if name not in headers]
    if missing:
        raise SignatureError("SignatureDoesNotMatch", f"signed headers missing from the request: {', '.join(missing)}")
    payload_hash = hashlib.sha256(body).hexdigest()
    claimed = headers.get("x-amz-content-sha256")
    if claimed is not None and claimed != payload_hash and claimed != "UNSIGNED-PAYLOAD":
        raise SignatureError("SignatureDoesNotMatch", "X-Amz-Content-SHA256 is not the body's")
    canonical = "\n".join([
        method.upper(),
        canonical_path(raw_path),
        canonical_query(query),
        "".join(f"{name}:{_SPACES.sub(' ', headers[name].strip())}\n" for name in signed_names),
        found["signed"],
        claimed if claimed == "UNSIGNED-PAYLOAD" else payload_hash,
    ])
    credential_scope = f"{date}/{scope_region}/{SERVICE}/aws4_request"
    to_sign = "\n".join([ALGORITHM, stamp, credential_scope, hashlib.sha256(canonical.encode()).hexdigest()])
    expected = hmac.new(signing_key(secret, date, scope_region), to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, found["signature"]):
        raise SignatureError("SignatureDoesNotMatch", "the request signature we calculated does not match the "
                             "signature you provided: check your secret access key and signing method")
    return Signed(access_key_id, scope_region, date)


_STAMP = re.compile(r"^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$")


def _signing_time(stamp: str) -> datetime.datetime:
    """X-Amz-Date (YYYYMMDDTHHMMSSZ) as a time; ValueError when it is not one (strptime costs 20 µs a request)."""
    found = _STAMP.match(stamp)
    if found is None:
        raise ValueError(stamp)
    return datetime.datetime(*(int(part) for part in found.groups()), tzinfo=datetime.UTC)


@functools.lru_cache(maxsize=4096)  # one per secret, day and region: four HMACs a request saved
def signing_key(secret: str, date: str, region: str, service: str = SERVICE) -> bytes:
    key = hmac.new(f"AWS4{secret}".encode(), date.encode(), hashlib.sha256).digest()
    for part in (region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def canonical_path(raw_path: str) -> str:
    """The path as SDKs sign it for SQS: each segment percent-encoded once more (AWS's rule for every service
    but S3), the empty path as "/"."""
    return quote(raw_path or "/", safe="/~")


def canonical_query(query: str) -> str:
    """Parameters sorted by name then value, names and values percent-encoded with AWS's unreserved set."""
    if not query:
        return ""
    pairs = []
    for part in query.split("&"):
        if not part:
            continue
        name, _, value = part.partition("=")
        pairs.append((quote(unquote(name.replace("+", " ")), safe="-_.~"),
                      quote(unquote(value.replace("+", " ")), safe="-_.~")))
    return "&".join(f"{name}={value}" for name, value in sorted(pairs))
