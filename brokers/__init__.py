"""Tideway's data plane: storage, protocol, broker server and client.

Nothing in this package imports Django: brokers run, deploy and are
fault-tested on their own, and the control plane talks to them only through
``brokers.client`` like any other program.
"""
