"""``python manage.py spark_job usage_billing --period 2026-11`` or ``spark_job consumer_lag``: Tideway's Spark jobs.

In billing, the one app that runs both: billing depends on the control plane (lag.job), never the other way."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from django.core.management.base import BaseCommand, CommandError

JOBS = ("usage_billing", "consumer_lag")


class Command(BaseCommand):
    help = ("Run a Spark job: usage_billing reads every cluster's __usage topic (an exact offset manifest) and writes "
            "the period's hourly and daily usage rollups (a rerun replaces them with identical rows); consumer_lag "
            "reads __lag and writes lag rollups (minute, hour, day) and every group's status and time-to-drain.")

    def add_arguments(self, parser):
        parser.add_argument("job", choices=JOBS, help="the job to run")
        parser.add_argument("--period", default=datetime.now(UTC).strftime("%Y-%m"),
                            help="usage_billing: the month, YYYY-MM (default: the current one)")
        parser.add_argument("--master", default="local[*]", help="Spark master (default %(default)s; spark://HOST:7077 for a cluster)")
        parser.add_argument("--bootstrap", default=None,
                            help="read this cluster's brokers (HOST:PORT,...) without credentials instead of every "
                                 "registered cluster (development)")
        parser.add_argument("--invoices", action="store_true",
                            help="usage_billing: then recompute every tenant's invoice for the period (drafts; final invoices never change)")
        parser.add_argument("--same-as", type=int, default=None, metavar="RUN",
                            help="usage_billing: read exactly the __usage offsets run RUN read (to check that a rerun gives the same rows)")

    def handle(self, *args, **options):
        if options["job"] == "consumer_lag":
            from tideway_server.lag.job import run_consumer_lag

            summary = run_consumer_lag(master=options["master"], bootstrap=options["bootstrap"],
                                       progress=lambda line: self.stderr.write(line))
            self.stdout.write(json.dumps(summary))
            return
        from tideway_server.billing.usage_job import run_usage_billing

        try:
            summary = run_usage_billing(options["period"], master=options["master"], bootstrap=options["bootstrap"],
                                        same_as=options["same_as"], progress=lambda line: self.stderr.write(line))
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if options["invoices"]:
            from tideway_server.billing.pricing import refresh_invoice
            from tideway_server.tenants.models import Tenant

            invoices = [refresh_invoice(tenant, options["period"]) for tenant in Tenant.objects.select_related("plan")]
            summary["invoices"] = len(invoices)
        self.stdout.write(json.dumps(summary))
