"""Kafka's wire protocol on a broker: unmodified Kafka clients and tools (librdkafka, kafka-python, aiokafka,
kcat) produce and consume Tideway's logs.

A third listener per broker (``--kafka-listen``) beside the client and internal ones. ``wire`` reads and writes
Kafka's frames with Kafka's own message definitions (the ``kio`` package); ``router`` takes each request through
the version table and the authentication gate; ``apis`` translates each API onto the broker's own handlers and
authorizer, so tenants, scopes, names, limits and metering are those of every other port.
"""
