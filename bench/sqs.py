"""Benchmark the SQS endpoint against the same work over REST, in one sitting (issue 46).

Starts a whole deployment in a temporary directory (Redis, a controller, 3 brokers, a Celery worker and `tideway
serve`, as the tests start them), a tenant on the business plan (rate limits do not bind) with AWS credentials,
and two queues of 3 partitions on 3 replicas: one made over SQS, one over REST. Then, for each interface in turn:

* send: ``--messages`` messages of 100 bytes in batches of 10 (SendMessageBatch / POST .../messages with 10) from
  ``--clients`` threads, each its own client (boto3 / httpx, keep-alive);
* receive and delete: the same threads receive 10 at a time (ReceiveMessage with a 1 s long poll / POST
  .../groups/sqs/receive) and delete what they got in one call (DeleteMessageBatch / POST .../ack), until every
  message was received.

Each phase reports messages/s and the machine's CPU seconds per million messages (clients and servers share the
cores), and the CPU µs per message of the clients (this process), the gateway and the brokers; ``sqs_over_rest`` is the ratio of the two interfaces' rates. Prints one JSON object on stdout; progress on
stderr.

    .venv/bin/python bench/sqs.py                      # 20,000 messages each way (about two minutes)
    .venv/bin/python bench/sqs.py --messages 5000      # quicker
"""

from __future__ import annotations

import argparse
import json
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
    def __init__(self, base_url: str, credentials: dict, clients: int) -> None:
        config = Config(max_pool_connections=2, retries={"max_attempts": 5, "mode": "standard"})
        self.clients = [boto3.client("sqs", endpoint_url=base_url + "/sqs", region_name=credentials["region"],
                                     aws_access_key_id=credentials["access_key_id"],
                                     aws_secret_access_key=credentials["secret_access_key"], config=config)
                        for _ in range(clients)]
        self.url = self.clients[0].create_queue(QueueName="bench-sqs")["QueueUrl"]

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
    def __init__(self, base_url: str, key: str, clients: int) -> None:
        self.clients = [httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
                        for _ in range(clients)]
        made = self.clients[0].post("/api/v1/queues/", json={"name": "bench-rest", "partitions": 3, "replication_factor": 3})
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


def measure(name: str, work, messages: int, clients: int) -> dict:
    batches = messages // BATCH // clients
    total = batches * BATCH * clients
    settle()
    progress(f"{name}: sending {total} messages from {clients} clients")
    with CpuMeter() as sending, ProcessMeter(deployment_role) as sending_by_role:
        _run_threads(clients, lambda i: work.send(i, batches))
    settle()
    progress(f"{name}: receiving and deleting them")
    received = [0]
    lock = threading.Lock()

    def receive(i: int) -> None:
        empty = 0
        while empty < 2:
            with lock:
                if received[0] >= total:
                    return
            got = work.receive(i)
            empty = 0 if got else empty + 1
            with lock:
                received[0] += got

    with CpuMeter() as receiving, ProcessMeter(deployment_role) as receiving_by_role:
        _run_threads(clients, receive)
    if received[0] < total:
        raise RuntimeError(f"{name}: received {received[0]} of {total}")
    return {"messages": total,
            "send_msgs_per_s": round(total / sending.seconds),
            "send_cpu_s_per_million": sending.cpu_s_per_million(total),
            "receive_delete_msgs_per_s": round(received[0] / receiving.seconds),
            "receive_delete_cpu_s_per_million": receiving.cpu_s_per_million(received[0]),
            "send_cpu_us_per_message_by_process": _by_role(sending_by_role, total),
            "receive_delete_cpu_us_per_message_by_process": _by_role(receiving_by_role, received[0])}


def _by_role(meter: ProcessMeter, messages: int) -> dict[str, int]:
    """CPU µs per message of the bench's clients, the gateway and the brokers together."""
    found = meter.per_message(messages)
    brokers = sum(v["cpu_us"] for k, v in found.items() if k.startswith("broker"))
    return {"clients": found.get("bench clients", {}).get("cpu_us", 0), "gateway": found.get("gateway", {}).get("cpu_us", 0),
            "brokers": brokers}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000, help="messages each way (default %(default)s)")
    parser.add_argument("--clients", type=int, default=8, help="client threads (default %(default)s)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tideway-bench-sqs-") as home:
        progress("starting a deployment")
        with running_control_plane(Path(home), f"sqlite://{home}/control.sqlite3") as plane:
            _slug, key = plane.create_tenant(plan="business")
            with plane.client(key) as api:
                answer = api.post(f"/api/v1/keys/{key.split('_')[1]}/aws-credentials")
                answer.raise_for_status()
                credentials = answer.json()
            rest = measure("REST", RestWork(plane.base_url, key, args.clients), args.messages, args.clients)
            sqs = measure("SQS", SqsWork(plane.base_url, credentials, args.clients), args.messages, args.clients)
    figures = {
        "benchmark": "sqs", "machine": platform.node(), "cpus": os.cpu_count(),
        "clients": args.clients, "batch": BATCH, "rest": rest, "sqs": sqs,
        "sqs_over_rest": {"send": round(sqs["send_msgs_per_s"] / rest["send_msgs_per_s"], 2),
                          "receive_delete": round(sqs["receive_delete_msgs_per_s"] / rest["receive_delete_msgs_per_s"], 2)},
    }
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
