"""The usage job on a Spark cluster (issue 45): a standalone master and worker started with the installed pyspark's
``spark-class``, the job submitted to it unchanged (``spark_job usage_billing --master spark://...``), and the
invoices it leads to byte-identical to those of a ``local[2]`` run over the same ``__usage`` offsets.

Everything runs in processes of its own, as an operator's would (a Spark context is one per process, and the other
Spark tests keep a local one open in this one): ``manage.py`` on a database file of the test's own, a broker, the
Spark master and worker.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.harness.processes import REPO_ROOT, free_port, wait_for_port
from tests.harness.waiting import eventually
from tests.usage_records import read_usage, totals
from tideway.native import Consumer, Producer, TidewayClient

pytestmark = pytest.mark.timeout(600)

SPARK_CLASS = Path(sys.executable).parents[1] / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" \
    / "site-packages" / "pyspark" / "bin" / "spark-class"

INVOICES = """
from tideway_server.billing.invoices import invoice_csv
from tideway_server.billing.models import Invoice
for invoice in Invoice.objects.filter(period={period!r}).order_by("tenant__slug"):
    print(invoice_csv(invoice), end="")
"""

TENANT = """
from tideway_server.tenants.actions import do_create_tenant
print(do_create_tenant("Spark Standalone Inc", plan_name="team", acting="test").id)
"""


def manage(env: dict, *args: str, timeout_s: float = 300) -> str:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout_s)
    assert done.returncode == 0, f"manage.py {' '.join(args)}: {done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture
def spark_cluster(tmp_path):
    """A standalone Spark master and one worker (2 cores, 2 GiB) on loopback; stopped at the end."""
    if not SPARK_CLASS.exists():
        pytest.skip(f"no spark-class at {SPARK_CLASS}")
    port, ui, worker_ui = free_port(), free_port(), free_port()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(tmp_path),
           "SPARK_WORKER_DIR": str(tmp_path / "work")}
    logs = [open(tmp_path / name, "wb") for name in ("spark-master.log", "spark-worker.log")]
    master = subprocess.Popen([str(SPARK_CLASS), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(ui)], env=env, stdout=logs[0],
                              stderr=subprocess.STDOUT)
    processes = [master]
    try:
        wait_for_port(port, timeout_s=90, process=master)
        worker = subprocess.Popen([str(SPARK_CLASS), "org.apache.spark.deploy.worker.Worker",
                                   f"spark://127.0.0.1:{port}", "--cores", "2", "--memory", "2g", "--webui-port",
                                   str(worker_ui), "--host", "127.0.0.1"], env=env, stdout=logs[1],
                                  stderr=subprocess.STDOUT)
        processes.append(worker)
        deadline = time.monotonic() + 90
        while b"Successfully registered with master" not in (tmp_path / "spark-worker.log").read_bytes():
            assert time.monotonic() < deadline and worker.poll() is None, (tmp_path / "spark-worker.log").read_text()
            time.sleep(0.5)
        yield f"spark://127.0.0.1:{port}"
    finally:
        for process in reversed(processes):
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
        for log in logs:
            log.close()


def test_the_usage_job_on_a_standalone_cluster_gives_the_invoices_of_local_mode(broker_factory, spark_cluster,
                                                                                  tmp_path):
    env = {**os.environ, "TIDEWAY_HOME": str(tmp_path), "DATABASE_URL": f"sqlite://{tmp_path}/tideway.sqlite3",
           "TIDEWAY_SPARK_DRIVER_MEMORY": "1g"}
    manage(env, "migrate", "--noinput")
    tenant_id = int(manage(env, "shell", "--verbosity", "0", "-c", TENANT).strip().splitlines()[-1])
    broker = broker_factory(extra_args=["--usage-storage-interval-s", "1"])
    topic = f"t{tenant_id}.orders"

    async def traffic() -> None:
        async with TidewayClient(broker.bootstrap) as client:
            await client.create_topic(topic, partitions=2)
            async with Producer(client, acks="all") as producer:
                for i in range(300):
                    await producer.send(topic, b"o" * (20 + i % 50), partition=i % 2)
            consumer = Consumer(client, auto_offset_reset="earliest")
            await consumer.start()
            await consumer.assign([(topic, 0), (topic, 1)], start="earliest")
            seen = 0
            while seen < 300:
                seen += sum(len(r) for r in (await consumer.getmany(timeout_ms=2000)).values())
            await consumer.stop()

            async def metered() -> bool:
                return totals(await read_usage(client), topic)["messages_out"] >= 300

            await eventually(metered, 30, "every read metered", interval_s=0.5)

    asyncio.run(traffic())
    period = datetime.now(UTC).strftime("%Y-%m")

    def run(master: str, *extra: str) -> tuple[dict, str]:
        summary = json.loads(manage(env, "spark_job", "usage_billing", "--period", period, "--master", master,
                                    "--bootstrap", broker.bootstrap, "--invoices", *extra).strip().splitlines()[-1])
        return summary, manage(env, "shell", "--verbosity", "0", "-c", INVOICES.format(period=period))

    local, local_invoices = run("local[2]")
    cluster, cluster_invoices = run(spark_cluster, "--same-as", str(local["run"]))
    assert local["rows"] > 0 and f",usage,bytes_out,{period}," in local_invoices, local_invoices
    assert local_invoices.startswith("invoice,tenant,period"), local_invoices
    assert (cluster["digest"], cluster["rows"], cluster["records"]) == (local["digest"], local["rows"], local["records"])
    assert cluster_invoices == local_invoices  # byte for byte
    assert "app-" in " ".join(os.listdir(tmp_path / "work")), "the job did not run on the cluster's worker"
