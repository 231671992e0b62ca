"""The ``__usage`` topic: where brokers and gateways write what they metered (see brokers/server/usage.py).

Its own module, importing nothing, because the gateway and the billing job need only these names:
importing them from the broker's meter loaded the broker's server package into the gateway, at its
first metering flush, a stall of tens of milliseconds in every open WebSocket's traffic.
"""

USAGE_TOPIC = "__usage"
USAGE_PARTITIONS = 4
USAGE_SETTINGS = {"retention.ms": str(400 * 24 * 3600 * 1000), "segment.bytes": str(64 << 20),
                  "max.message.bytes": str(8 << 20)}
