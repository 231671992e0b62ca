"""ASGI entry point of the control plane and gateway (HTTP and WebSocket):
``uvicorn tideway_server.controlplane.asgi:application`` (``tideway serve`` runs it)."""

import gc
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tideway_server.controlplane.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

# Django must be set up before the WebSocket routes (and their models) are imported.
http_application = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from tideway_server.gateway.asgi import GatewayHTTP  # noqa: E402
from tideway_server.gateway.routing import websocket_urlpatterns  # noqa: E402

# WebSocket clients authenticate with a key or a short-lived token, never with cookies,
# so pages of any origin may connect (no origin check).
application = ProtocolTypeRouter({"http": GatewayHTTP(http_application), "websocket": URLRouter(websocket_urlpatterns)})

# Everything loaded so far lives as long as the process: keep it out of the garbage
# collector's full passes, which otherwise stall the event loop (as the brokers do).
gc.freeze()
# A young collection every 5,000 objects rather than 700: requests in flight hold thousands
# (a publish of 100 messages, its records' futures), and each collection went over them again.
# REST publish at 8 x 100 (bench/gateway.py, 10 s): 3,218 young and 26 full collections, 0.62 s
# of the gateway's CPU (full ones 7.8 ms each, the event loop stalled) -> 53 and none, 0.11 s.
gc.set_threshold(5_000, 10, 10)
