"""Command-line commands of the data plane: broker, topics, produce, consume, queue, dlq, groups.

``tideway_server.cli.main`` assembles these with the control plane's commands. Everything here talks to brokers over
the native protocol only. One module per family of commands; ``options`` holds what they share.
"""

from __future__ import annotations

import argparse

from tideway_server.brokers.cli.broker import add_broker, load_cluster_secret_or_exit
from tideway_server.brokers.cli.options import (
    cli_credentials,
    cli_tls,
    credential_arguments,
    host_port,
    run_async,
    server_security_arguments,
)
from tideway_server.brokers.cli.queues import add_dlq, add_groups, add_queue
from tideway_server.brokers.cli.records import add_consume, add_produce
from tideway_server.brokers.cli.topics import add_topics
from tideway_server.brokers.cli.transactions import add_transactions

__all__ = ["add_commands", "cli_credentials", "cli_tls", "credential_arguments", "host_port",
           "load_cluster_secret_or_exit", "run_async", "server_security_arguments"]


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    add_broker(subparsers)
    add_topics(subparsers)
    add_transactions(subparsers)
    add_produce(subparsers)
    add_consume(subparsers)
    add_queue(subparsers)
    add_dlq(subparsers)
    add_groups(subparsers)
