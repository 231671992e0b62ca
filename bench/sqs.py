"""Benchmark the SQS endpoint against the same work over REST, in one sitting (issue 46).

Starts a whole deployment in a temporary directory (Redis, a controller, 3 brokers, a Celery worker and `tideway
serve`, as the tests start them), a tenant on the business plan (rate limits do not bind) with AWS credentials,
and two queues of 3 partitions on 3 replicas: one made over SQS, one over REST. Then, for each interface in turn:

* send: ``--messages`` messages of 100 bytes in batches of 10 (SendMessageBatch / POST .../messages with 10) from
  ``--clients`` threads spread over ``--processes`` client processes, each thread its own client (boto3 / httpx,
  keep-alive);
* receive and delete: the same threads receive 10 at a time (ReceiveMessage with a 1 s long poll / POST
  .../groups/sqs/receive) and delete what they got in one call (DeleteMessageBatch / POST .../ack), until every
  message was received.

Each phase reports messages/s and the machine's CPU seconds per million messages (clients and servers share the
cores), and the CPU µs per message of the clients, the gateway and the brokers; ``sqs_over_rest`` is the ratio
of the two interfaces' rates. Prints one JSON object on stdout; progress on stderr.

    .venv/bin/python bench/sqs.py                      # 20,000 messages each way (about two minutes)
    .venv/bin/python bench/sqs.py --messages 5000      # quicker
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import sys
import tempfile
import threading
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import boto3  # noqa: E402
import httpx  # noqa: E402
from botocore.config import Config  # noqa: E402

from bench.common import CpuMeter, ProcessMeter, deployment_role, progress, settle  # noqa: E402
from tests.harness.control_plane import running_control_plane  # noqa: E402

BODY = "x" * 100
BATCH = 10


def _run_threads(count: int, work) -> None:
    threads = [threading.Thread(target=work, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


class SqsWork:
    """One process's boto3 clients (made after the fork: neither boto3's nor httpx's pools survive one)."""

    def __init__(self, base_url: str, credentials: dict, clients: int) -> None:
        config = Config(max_pool_connections=2, retries={"max_attempts": 5, "mode": "standard"})
        self.clients = [boto3.client("sqs", endpoint_url=base_url + "/sqs", region_name=credentials["region"],
                                     aws_access_key_id=credentials["access_key_id"],
                                     aws_secret_access_key=credentials["secret_access_key"], config=config)
                        for _ in range(clients)]
        self.url = self.clients[0].get_queue_url(QueueName="bench-sqs")["QueueUrl"]

    @staticmethod
    def prepare(base_url: str, credentials: dict) -> None:
        boto3.client("sqs", endpoint_url=base_url + "/sqs", region_name=credentials["region"],
                     aws_access_key_id=credentials["access_key_id"],
                     aws_secret_access_key=credentials["secret_access_key"]).create_queue(QueueName="bench-sqs")

    def send(self, index: int, batches: int) -> None:
        client = self.clients[index]
        for _ in range(batches):
            answer = client.send_message_batch(QueueUrl=self.url, Entries=[
                {"Id": str(i), "MessageBody": BODY} for i in range(BATCH)])
            if answer.get("Failed"):
                raise RuntimeError(f"send failed: {answer['Failed'][:2]}")

    def receive(self, index: int) -> int:
        client = self.clients[index]
        messages = client.receive_message(QueueUrl=self.url, MaxNumberOfMessages=BATCH, WaitTimeSeconds=1).get("Messages", [])
        if messages:
            client.delete_message_batch(QueueUrl=self.url, Entries=[
                {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(messages)])
        return len(messages)


class RestWork:
    """One process's httpx clients."""

    def __init__(self, base_url: str, key: str, clients: int) -> None:
        self.clients = [httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
                        for _ in range(clients)]

    @staticmethod
    def prepare(base_url: str, key: str) -> None:
        with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as client:
            made = client.post("/api/v1/queues/", json={"name": "bench-rest", "partitions": 3, "replication_factor": 3})
            if made.status_code != 201:
                raise RuntimeError(made.text)

    def send(self, index: int, batches: int) -> None:
        client = self.clients[index]
        for _ in range(batches):
            answer = client.post("/api/v1/queues/bench-rest/messages", json={"messages": [{"value": BODY}] * BATCH})
            if answer.status_code != 200:
                raise RuntimeError(answer.text)

    def receive(self, index: int) -> int:
        client = self.clients[index]
        answer = client.post("/api/v1/queues/bench-rest/groups/sqs/receive", json={"max_messages": BATCH, "wait_seconds": 1})
        messages = answer.json()["messages"]
        if messages:
            client.post("/api/v1/queues/bench-rest/groups/sqs/ack", json={"receipts": [m["receipt"] for m in messages]})
        return len(messages)


def _in_processes(processes: int, body) -> None:
    """``body(process_index)`` in ``processes`` forked processes at once; raises if one failed."""
    context = multiprocessing.get_context("fork")
    children = [context.Process(target=body, args=(p,)) for p in range(processes)]
    for child in children:
        child.start()
    for child in children:
        child.join()
    failed = [child.exitcode for child in children if child.exitcode != 0]
    if failed:
        raise RuntimeError(f"{len(failed)} client processes failed (exit codes {failed})")


def measure(name: str, make_work, messages: int, clients: int, processes: int) -> dict:
    """``make_work(threads)``: one process's clients. ``clients`` threads in all, spread over ``processes``."""
    each = clients // processes
    batches = messages // BATCH // (each * processes)
    total = batches * BATCH * each * processes
    settle()
    progress(f"{name}: sending {total} messages from {each * processes} clients in {processes} processes")

    def send(_process: int) -> None:
        work = make_work(each)
        _run_threads(each, lambda i: work.send(i, batches))

    with CpuMeter() as sending, ProcessMeter(deployment_role) as sending_by_role, ClientsCpu() as sending_clients:
        _in_processes(processes, send)
    settle()
    progress(f"{name}: receiving and deleting them")
    received = multiprocessing.get_context("fork").Value("q", 0)

    def receive(_process: int) -> None:
        work = make_work(each)

        def loop(i: int) -> None:
            empty = 0
            while empty < 2 and received.value < total:
                got = work.receive(i)
                empty = 0 if got else empty + 1
                with received.get_lock():
                    received.value += got

        _run_threads(each, loop)

    with CpuMeter() as receiving, ProcessMeter(deployment_role) as receiving_by_role, ClientsCpu() as receiving_clients:
        _in_processes(processes, receive)
    if received.value < total:
        raise RuntimeError(f"{name}: received {received.value} of {total}")
    return {"messages": total,
            "send_msgs_per_s": round(total / sending.seconds),
            "send_cpu_s_per_million": sending.cpu_s_per_million(total),
            "receive_delete_msgs_per_s": round(received.value / receiving.seconds),
            "receive_delete_cpu_s_per_million": receiving.cpu_s_per_million(received.value),
            "send_cpu_us_per_message_by_process": _by_role(sending_by_role, sending_clients, total),
            "receive_delete_cpu_us_per_message_by_process": _by_role(receiving_by_role, receiving_clients,
                                                                     received.value)}


class ClientsCpu:
    """CPU seconds of this process and of the client processes it forked and reaped during the phase."""

    @staticmethod
    def _now() -> float:
        times = os.times()
        return times.user + times.system + times.children_user + times.children_system

    def __enter__(self) -> ClientsCpu:
        self._start = self._now()
        return self

    def __exit__(self, *exc_info) -> None:
        self.cpu_s = self._now() - self._start


def _by_role(meter: ProcessMeter, clients: ClientsCpu, messages: int) -> dict[str, int]:
    """CPU µs per message of the bench's clients, the gateway and the brokers together."""
    found = meter.per_message(messages)
    brokers = sum(v["cpu_us"] for k, v in found.items() if k.startswith("broker"))
    return {"clients": round(clients.cpu_s / messages * 1e6) if messages else 0,
            "gateway": found.get("gateway", {}).get("cpu_us", 0), "brokers": brokers}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000, help="messages each way (default %(default)s)")
    parser.add_argument("--clients", type=int, default=8, help="client threads in all (default %(default)s)")
    parser.add_argument("--processes", type=int, default=4,
                        help="client processes the threads are spread over (default %(default)s): one Python "
                             "process's lock would cap boto3, whose calls cost twice httpx's CPU")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tideway-bench-sqs-") as home:
        progress("starting a deployment")
        with running_control_plane(Path(home), f"sqlite://{home}/control.sqlite3") as plane:
            _slug, key = plane.create_tenant(plan="business")
            with plane.client(key) as api:
                answer = api.post(f"/api/v1/keys/{key.split('_')[1]}/aws-credentials")
                answer.raise_for_status()
                credentials = answer.json()
            RestWork.prepare(plane.base_url, key)
            rest = measure("REST", lambda each: RestWork(plane.base_url, key, each), args.messages, args.clients,
                           args.processes)
            SqsWork.prepare(plane.base_url, credentials)
            sqs = measure("SQS", lambda each: SqsWork(plane.base_url, credentials, each), args.messages, args.clients,
                          args.processes)
    figures = {
        "benchmark": "sqs", "machine": platform.node(), "cpus": os.cpu_count(),
        "clients": args.clients, "processes": args.processes, "batch": BATCH, "rest": rest, "sqs": sqs,
        "sqs_over_rest": {"send": round(sqs["send_msgs_per_s"] / rest["send_msgs_per_s"], 2),
                          "receive_delete": round(sqs["receive_delete_msgs_per_s"] / rest["receive_delete_msgs_per_s"], 2)},
    }
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
