"""Tideway's data plane: storage, replication, the broker server, groups and queues.

The wire codecs (protocol frames and messages, RecordBatch, errors) and the
native client live in the client distribution (``tideway.protocol``,
``tideway.record``, ``tideway.native``), which brokers import, as Kafka's
brokers import its clients module's protocol and record classes.

Nothing in this package imports Django: brokers run, deploy and are
fault-tested on their own, and the control plane talks to them only through
``tideway.native`` like any other program.
"""
