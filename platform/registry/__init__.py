"""Schema registry: subjects, versions and ids, Avro / JSON Schema / Protobuf, compatibility modes.

Its REST routes follow Confluent Schema Registry's API, scoped to the caller's tenant.
"""
