"""Celery on the SQS endpoint (issue 46): kombu's SQS transport, unchanged, carries 10,000 tasks to two workers;
one is SIGKILLed mid-run and every task still completes (acks_late: what the dead worker held is received
again when its visibility timeout ends)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest

from tests.harness.processes import REPO_ROOT
from tests.sqs.conftest import aws_credentials, boto3_client

pytestmark = pytest.mark.timeout(600)

TASKS = 10_000
KILL_AFTER = 5_000  # tasks done when the first worker is killed (half of them)
PUBLISHERS = 4


def _done(folder: Path) -> list[int]:
    return [int(line) for path in folder.glob("*.done") for line in path.read_text().split()]


def test_ten_thousand_celery_tasks_complete_through_a_worker_killed_mid_run(plane, tmp_path, monkeypatch):
    _, key = plane.create_tenant(plan="business")  # 10,000 requests/s: the run is not throttled
    credentials = aws_credentials(plane, key)
    address = urlsplit(plane.base_url)
    env = {**os.environ, "TIDEWAY_CELERY_QUEUE": "celery-tasks", "TIDEWAY_CELERY_DONE_DIR": str(tmp_path),
           "TIDEWAY_CELERY_SQS_REGION": credentials["region"],
           "TIDEWAY_CELERY_SQS_URL": f"sqs://{quote(credentials['access_key_id'], safe='')}:"
                                     f"{quote(credentials['secret_access_key'], safe='')}@{address.hostname}:{address.port}"}
    workers = []
    for name in ("first", "second"):
        log = open(tmp_path / f"{name}.log", "wb")
        workers.append(subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tests.sqs.celery_app", "worker", "--pool", "threads",
             "--concurrency", "4", "--hostname", f"{name}@%h", "--without-gossip", "--without-mingle",
             "--without-heartbeat", "--loglevel", "INFO"], cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
        log.close()
    try:
        for name in ("TIDEWAY_CELERY_QUEUE", "TIDEWAY_CELERY_SQS_REGION", "TIDEWAY_CELERY_SQS_URL"):
            monkeypatch.setenv(name, env[name])  # read when the application is imported (here, as in the workers)
        from tests.sqs.celery_app import app, record

        app.conf.broker_url = env["TIDEWAY_CELERY_SQS_URL"]  # in case an earlier import read other values
        app.conf.task_default_queue = env["TIDEWAY_CELERY_QUEUE"]
        failures = []

        def publish(first: int) -> None:
            try:
                for number in range(first, TASKS, PUBLISHERS):
                    record.delay(number)
            except Exception as exc:  # noqa: BLE001 - reported below
                failures.append(repr(exc))

        publishers = [threading.Thread(target=publish, args=(i,)) for i in range(PUBLISHERS)]
        for publisher in publishers:
            publisher.start()
        deadline = time.monotonic() + 300
        while len(_done(tmp_path)) < KILL_AFTER and time.monotonic() < deadline:
            assert all(w.poll() is None for w in workers), (tmp_path / "first.log").read_text()[-3000:]
            time.sleep(0.2)
        print(f"killing at {time.monotonic() - deadline + 300:.1f}s", flush=True)
        workers[0].send_signal(signal.SIGKILL)
        workers[0].wait(10)
        for publisher in publishers:
            publisher.join(300)
        assert not failures, failures[:3]
        print(f"published at {time.monotonic() - deadline + 300:.1f}s", flush=True)
        while set(_done(tmp_path)) != set(range(TASKS)) and time.monotonic() < deadline:
            assert workers[1].poll() is None, (tmp_path / "second.log").read_text()[-3000:]
            time.sleep(0.5)
        done = _done(tmp_path)
        print(f"done at {time.monotonic() - deadline + 300:.1f}s", len(done), flush=True)
        assert set(done) == set(range(TASKS)), f"{TASKS - len(set(done))} tasks never ran"
        assert len(done) >= TASKS  # some ran twice: those the killed worker finished but had not yet acknowledged

        # Every task was acknowledged in the end: the queue is empty, nothing in flight.
        sqs = boto3_client(plane, credentials)
        url = sqs.get_queue_url(QueueName="celery-tasks")["QueueUrl"]
        counts = None
        while time.monotonic() < deadline:
            attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
            counts = (attributes["ApproximateNumberOfMessages"], attributes["ApproximateNumberOfMessagesNotVisible"])
            if counts == ("0", "0"):
                break
            time.sleep(1)
        assert counts == ("0", "0")
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.terminate()
                try:
                    worker.wait(20)
                except subprocess.TimeoutExpired:
                    worker.kill()
