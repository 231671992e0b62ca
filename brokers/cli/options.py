"""What every data-plane command shares: the event loop, addresses, credentials, TLS and a client."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from tideway.protocol import errors

DEFAULT_BOOTSTRAP = "127.0.0.1:9401"


def run_async(coroutine) -> int:
    """Run ``coroutine`` on uvloop when installed; return its exit code."""
    try:
        import uvloop

        return uvloop.run(coroutine)
    except ImportError:
        return asyncio.run(coroutine)


def host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host or "127.0.0.1", int(port)


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def non_negative_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds of at least 0")
    return seconds


def bootstrap_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("TIDEWAY_BOOTSTRAP", DEFAULT_BOOTSTRAP),
        help="broker addresses HOST:PORT[,HOST:PORT...] (default: $TIDEWAY_BOOTSTRAP or %(default)s)",
    )
    credential_arguments(parser)


def credential_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--api-key",
        default=os.environ.get("TIDEWAY_API_KEY"),
        help="a tenant API key (tw_...) or a service key (tws_...) (default: $TIDEWAY_API_KEY; without one, the "
        "operator key of the deployment whose cluster secret is in $TIDEWAY_HOME/cluster-secret, if readable)",
    )
    parser.add_argument("--cafile", default=os.environ.get("TIDEWAY_CAFILE"),
                        help="connect with TLS, trusting this PEM CA bundle (default: $TIDEWAY_CAFILE)")
    parser.add_argument("--tls", action="store_true", help="connect with TLS, trusting the system's CAs")


def server_security_arguments(parser: argparse.ArgumentParser, *, peers: str) -> None:
    """The cluster secret and TLS flags of a server process (a broker or a controller)."""
    parser.add_argument(
        "--cluster-secret-file",
        help="file holding the deployment's cluster secret (hex); $TIDEWAY_CLUSTER_SECRET wins over it "
        "(default $TIDEWAY_HOME/cluster-secret, generated with mode 0600 when missing)",
    )
    parser.add_argument("--certfile", help="serve with TLS, with this PEM certificate (chain)")
    parser.add_argument("--keyfile", help="the certificate's PEM private key (with --certfile)")
    parser.add_argument("--cafile", help=f"PEM CAs that sign {peers} certificates (with --certfile)")


def cli_credentials(args: argparse.Namespace):
    """--api-key, else $TIDEWAY_API_KEY, else this machine's operator key (from the deployment's cluster secret)."""
    from tideway_server.brokers.security.keys import (
        CLUSTER_SECRET_FILE,
        ClusterSecretError,
        load_cluster_secret,
        service_key,
    )

    from tideway.native.credentials import ApiKey

    if getattr(args, "api_key", None):
        return ApiKey(args.api_key)
    home = os.environ.get("TIDEWAY_HOME", "var")
    try:
        secret = load_cluster_secret(os.path.join(home, CLUSTER_SECRET_FILE))
    except (ClusterSecretError, OSError):
        return None  # the broker will say that it needs a key
    return ApiKey(service_key(secret, "operator"))


def cli_tls(args: argparse.Namespace):
    from tideway.native.conn import tls_context

    if getattr(args, "cafile", None) or getattr(args, "tls", False):
        return tls_context(getattr(args, "cafile", None))
    return None


def client_for(args: argparse.Namespace, bootstrap: str | None = None):
    """A TidewayClient with the command line's credentials and TLS settings (not started)."""
    from tideway.native import TidewayClient

    return TidewayClient(bootstrap or args.bootstrap, credentials=cli_credentials(args), ssl_context=cli_tls(args))


async def with_client(args: argparse.Namespace, action) -> int:

    try:
        async with client_for(args) as client:
            return await action(client) or 0
    except errors.TidewayError as exc:
        print(f"tideway: {exc}", file=sys.stderr)
        return 1


def message_json(message) -> dict:
    import base64

    out = {
        "receipt": message.receipt,
        "partition": message.partition,
        "offset": message.offset,
        "delivery_count": message.delivery_count,
        "lock_deadline_ms": message.lock_deadline_ms,
        "timestamp_ms": message.timestamp_ms,
    }
    for name, data in (("key", message.key), ("value", message.value)):
        if data is None:
            out[name] = None
            continue
        try:
            out[name] = data.decode()
        except UnicodeDecodeError:
            out[f"{name}_base64"] = base64.b64encode(data).decode()
    out["headers"] = {k: (v or b"").decode(errors="replace") for k, v in message.headers}
    return out
