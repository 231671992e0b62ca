"""``python manage.py controller``: the same as ``tideway controller``."""

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Run a cluster controller (one active per cluster; others stand by). See 'tideway controller --help'."

    def add_arguments(self, parser):
        parser.add_argument("--listen", default="127.0.0.1:9400", help="HOST:PORT brokers reach it on")
        parser.add_argument("--cluster", default="local", help="cluster name")
        parser.add_argument("--lease-ms", type=int, default=3000)
        parser.add_argument("--broker-session-timeout-ms", type=int, default=3000)

    def handle(self, *args, **options):
        from tideway_cli.main import main

        main([
            "controller", "--listen", options["listen"], "--cluster", options["cluster"],
            "--lease-ms", str(options["lease_ms"]), "--broker-session-timeout-ms", str(options["broker_session_timeout_ms"]),
        ])
