"""The same SQS scenario against Tideway and against moto's SQS server, a reference nobody here wrote (issue 46):
the two transcripts (statuses, error codes, counts, the names in answers) match, step by step, except where
docs/sqs.md lists a difference (``DIFFERENCES`` below names each one and its place in the docs)."""

from __future__ import annotations

import socket

import boto3
import pytest
from botocore.config import Config

from tests.sqs import transcript
from tests.sqs.conftest import boto3_client

pytestmark = pytest.mark.timeout(300)

# step -> why Tideway's answer differs from moto's (each is in docs/sqs.md, "Compared with moto").
DIFFERENCES: dict[str, str] = {
    "create a queue with a bad attribute value": "moto takes VisibilityTimeout -5; SQS and Tideway refuse it "
                                                 "(InvalidAttributeValue)",
    "list the queues": "so moto lists the queue it made with VisibilityTimeout -5",
    "set an unknown attribute": "moto takes an attribute SQS does not have; SQS and Tideway refuse it "
                                "(InvalidAttributeName)",
    "send the same deduplication id again": "Tideway answers a FIFO duplicate with the MessageId of the copy it "
                                            "kept; moto makes up a new one",
}


@pytest.fixture(scope="module")
def moto_sqs():
    from moto.server import ThreadedMotoServer

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        yield boto3.client("sqs", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                           aws_access_key_id="testing", aws_secret_access_key="testing",
                           config=Config(retries={"total_max_attempts": 1}))
    finally:
        server.stop()


def test_the_scenario_answers_as_moto_does(plane, tenant, moto_sqs):
    ours = transcript.run(boto3_client(plane, tenant[2], retries={"total_max_attempts": 1}), "transcript")
    theirs = transcript.run(moto_sqs, "transcript")
    assert [step[0] for step in ours] == [step[0] for step in theirs]
    mismatches = [(a, b) for a, b in zip(ours, theirs, strict=True) if a != b and a[0] not in DIFFERENCES]
    for a, b in mismatches:
        print(f"{a[0]}:\n  tideway {a[1:]}\n  moto    {b[1:]}")
    assert not mismatches
    unused = set(DIFFERENCES) - {a[0] for a, b in zip(ours, theirs, strict=True) if a != b}
    assert not unused, f"listed as differences but the same now: {unused}"
