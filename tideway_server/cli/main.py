"""``tideway`` console script: parses the command line and runs a subcommand."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from tideway_server.brokers import cli as broker_cli
from tideway_server.cli import alerts, billing, control, tenants

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tideway",
        description="Tideway: streams and queues on one replicated log. Run 'tideway COMMAND --help' for a command.",
    )
    parser.add_argument(
        "--log-level",
        default=os.environ.get("TIDEWAY_LOG_LEVEL", "INFO"),
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log verbosity on stderr (default: $TIDEWAY_LOG_LEVEL or INFO)",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    broker_cli.add_commands(subparsers)
    control.add_commands(subparsers)
    tenants.add_commands(subparsers)
    billing.add_commands(subparsers)
    alerts.add_commands(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
