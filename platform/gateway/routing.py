"""WebSocket routes of the gateway."""

from django.urls import re_path
from tideway_server.gateway.consumers import QueueSocket

websocket_urlpatterns = [
    re_path(r"^ws/v1/queues/(?P<name>[A-Za-z0-9._-]{1,100})$", QueueSocket.as_asgi()),
]
