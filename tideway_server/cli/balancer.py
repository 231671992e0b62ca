"""HAProxy in front of several gateways (`tideway up --gateways N`, and tests of gateways behind a balancer).

Gateways keep no state of their own that a client needs on its next request: API keys and queues come from the
database, rate-limit buckets and dedup windows live in Redis, browser tokens are signed with the deployment's
signing key, and a WebSocket subscriber's deliveries are the brokers' (unacknowledged ones come back after their
visibility timeout). So any gateway can take any request, and a balancer only has to spread connections and stop
sending to a gateway that is gone.

Choices (docs/operations.md, "Several gateways"):
- HTTP mode, ``leastconn``: WebSocket connections last long, so new ones go where the fewest are open.
- A gateway is checked every second (a TCP connect) and out after two failures; a connection that fails is
  retried on another gateway (``retry-on conn-failure`` with ``redispatch``). A request that reached a gateway
  which then died is *not* retried by the balancer (a publish may have been stored): the client gets 502 and
  retries it itself, with its dedup ids (docs/api.md).
- ``timeout tunnel`` 1 h for WebSockets (the gateway pings every 20 s); ``timeout server`` 60 s covers the
  longest long poll (``wait_seconds`` 20).
- The balancer is the edge: a client's own X-Forwarded-For is dropped and the real address added; the gateways
  (uvicorn) trust it from 127.0.0.1 only.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

__all__ = ["haproxy_config", "start_haproxy"]

MAX_CONNECTIONS = 20_000  # the balancer's own limit; each gateway has its own below it


def haproxy_config(listen: str, gateways: list[str], *, max_connections: int = MAX_CONNECTIONS) -> str:
    """An HAProxy configuration listening on ``listen`` (HOST:PORT) and spreading over ``gateways`` (HOST:PORT each)."""
    if not gateways:
        raise ValueError("a balancer needs at least one gateway")
    servers = "\n".join(f"    server gateway-{i} {address} check inter 1s fall 2 rise 2"
                        for i, address in enumerate(gateways, start=1))
    return f"""# Written by tideway; see tideway_server/cli/balancer.py for why each setting is what it is.
global
    log stdout format raw local0 notice
    maxconn {max_connections}

defaults
    mode http
    log global
    option dontlognull
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    timeout tunnel 1h
    timeout client-fin 5s
    timeout http-request 10s
    retries 3
    retry-on conn-failure
    option redispatch 1

frontend tideway
    bind {listen}
    maxconn {max_connections}
    http-request del-header x-forwarded-for
    option forwardfor
    default_backend gateways

backend gateways
    balance leastconn
{servers}
"""


def start_haproxy(config_path: Path, listen: str, gateways: list[str], *, log_file) -> subprocess.Popen:
    """Write the configuration to ``config_path``, check it, and start HAProxy in the foreground (``-db``; its
    log to ``log_file``). Raises SystemExit with what to do when HAProxy is missing or refuses the configuration."""
    binary = shutil.which("haproxy") or next((p for p in ("/usr/sbin/haproxy",) if Path(p).exists()), None)
    if binary is None:
        raise SystemExit("tideway: several gateways need HAProxy in front: apt-get install haproxy (infra/setup.sh does)")
    # HAProxy needs two descriptors per connection (client and gateway side) and refuses to start above the limit.
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = MAX_CONNECTIONS if hard == resource.RLIM_INFINITY else min(MAX_CONNECTIONS, (hard - 100) // 2)
    config_path.write_text(haproxy_config(listen, gateways, max_connections=limit))
    checked = subprocess.run([binary, "-c", "-q", "-f", str(config_path)], capture_output=True, text=True)
    if checked.returncode != 0:
        raise SystemExit(f"tideway: HAProxy refused {config_path}: {checked.stderr.strip() or checked.stdout.strip()}")
    return subprocess.Popen([binary, "-db", "-f", str(config_path)], stdout=log_file, stderr=subprocess.STDOUT,
                            start_new_session=True)
