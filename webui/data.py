"""The console's way to a queue's data: the gateway's operations, with the member as the caller.

Console views are synchronous Django views; the gateway's operations are async
and use the pooled broker clients of the server's event loop. ``run`` hands a
call to that loop (asgiref's ``async_to_sync``) so the console and the data API
share one client per cluster and one implementation of every rule.
"""

from __future__ import annotations

from asgiref.sync import SyncToAsync, async_to_sync
from django.http import Http404
from tideway_server.controlplane.api.principal import Principal
from tideway_server.gateway.errors import GatewayError
from tideway_server.gateway.operations.members import QueueInfo, member_caller, member_queue

caller_for = member_caller  # the console's name for it: data.caller_for(request.principal)


def queue_info(principal: Principal, name: str) -> QueueInfo:
    """The ready queue ``name`` of the member's tenant, or 404."""
    info = member_queue(principal, name)
    if info is None:
        raise Http404(f"queue {name!r} does not exist or is not ready")
    return info


def run(operation, *args, **kwargs):
    """Run a gateway operation (async) from a console view; its GatewayError comes back as a (code, message) pair."""
    return async_to_sync(operation)(*args, **kwargs)


def refusal(exc: GatewayError) -> str:
    return f"{exc.message} ({exc.code})"


def in_server_loop() -> bool:
    """True when ``run`` hands calls to a long-lived server loop (ASGI), where a task may outlive the request;
    False under a test client or WSGI, where each call gets a loop of its own."""
    loop = getattr(SyncToAsync.threadlocal, "main_event_loop", None)
    return loop is not None and loop.is_running()
