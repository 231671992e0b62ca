"""A Celery application whose broker is Tideway's SQS endpoint, through kombu's SQS transport unchanged
(tests/sqs/test_celery.py starts its workers). Each task appends its number to a file of its worker's process."""

from __future__ import annotations

import os

from celery import Celery

app = Celery("tideway_sqs_tasks")
app.conf.update(
    broker_url=os.environ.get("TIDEWAY_CELERY_SQS_URL", "sqs://"),  # sqs://ACCESS_KEY_ID:SECRET@HOST:PORT
    broker_transport_options={
        "region": os.environ.get("TIDEWAY_CELERY_SQS_REGION", "us-east-1"),
        "is_secure": False,
        "visibility_timeout": 15,  # a task a dead worker held runs again 15 s later (acks_late)
        "wait_time_seconds": 2,
        "polling_interval": 0.2,
    },
    task_default_queue=os.environ.get("TIDEWAY_CELERY_QUEUE", "celery"),
    task_acks_late=True,  # acknowledged (deleted) when done: a worker's death loses nothing
    worker_prefetch_multiplier=4,
    worker_enable_remote_control=False,  # pidbox needs fanout, which SQS has not
    broker_connection_retry_on_startup=True,
    task_ignore_result=True,
)


@app.task(name="record")
def record(number: int) -> None:
    with open(os.path.join(os.environ["TIDEWAY_CELERY_DONE_DIR"], f"{os.getpid()}.done"), "a") as out:
        out.write(f"{number}\n")
