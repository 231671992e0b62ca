"""The AWS JavaScript SDK v3 (``@aws-sdk/client-sqs`` under Debian's Node.js) against the SQS endpoint (issue 46):
it checks the MD5 digest of every body it sends and receives, which boto3 does not (the attributes' digests are
checked against a computation of the test's own in test_boto3.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

SCENARIO = Path(__file__).with_name("js")


def _missing() -> str | None:
    if shutil.which("node") is None:
        return "Node.js is not installed (infra/setup.sh installs it)"
    if not (SCENARIO / "node_modules" / "@aws-sdk" / "client-sqs").exists():
        return "@aws-sdk/client-sqs is not installed (infra/setup.sh runs npm ci in tests/sqs/js)"
    return None


@pytest.mark.skipif(_missing() is not None, reason=str(_missing()))
def test_the_javascript_sdk_sends_receives_and_checks_every_digest(plane, tenant):
    credentials = tenant[2]
    run = subprocess.run(["node", "scenario.mjs", plane.base_url + "/sqs", credentials["region"],
                          credentials["access_key_id"], credentials["secret_access_key"]],
                         cwd=SCENARIO, capture_output=True, text=True, timeout=280)
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout)
    assert seen["url"].endswith("/js-orders")
    assert seen["batch"] == {"successful": 10, "failed": 0}
    bodies = [r["body"] for r in seen["received"]]
    assert sorted(bodies) == sorted(["single ✓", *(f"js {i}" for i in range(10))]), bodies
    again = [r for r in seen["received"] if r["receives"] == "2"]
    assert len(again) == 1  # the one made visible again was received a second time
    for item in seen["received"]:
        i = 99 if item["body"] == "single ✓" else int(item["body"].split()[1])
        assert item["kind"] == f"order-{i} ünïcode" and float(item["amount"]) == i * 1.5
        assert item["blob"] == [i, 0, 255] and item["type"] == "String.custom"
    assert seen["attributes"]["ApproximateNumberOfMessages"] == "0"
    assert seen["unknownQueue"]["status"] == 400 and seen["unknownQueue"]["name"] == "QueueDoesNotExist"

    assert seen["thousand"] == {"sent": 1000, "received": 1000, "same": True, "counts": [0, 0, 0]}
    dead = seen["deadLetters"]
    assert dead["sources"] == ["js-jobs"] and dead["receives"] == [2] * 20 and dead["dead"] == [20, 0, 0]
    assert dead["status"] == "COMPLETED" and dead["moved"] == 20 and dead["back"] == 20
    assert dead["after"] == [[0, 0, 0], [0, 0, 0]]
    fifo = seen["fifo"]
    assert sorted(fifo["bodies"]) == sorted([f"g{i % 3}-{i}" for i in range(30)] + ["once"]) and fifo["sameId"]
    for group in ("g0", "g1", "g2"):
        numbers = [int(b.split("-")[1]) for b in fifo["bodies"] if b.startswith(f"{group}-")]
        assert numbers == sorted(numbers), (group, numbers)
    assert fifo["counts"] == [0, 0, 0]
    assert seen["errors"] == {"tooMany": {"name": "InvalidParameterValue", "status": 400},
                              "emptyBatch": {"name": "EmptyBatchRequest", "status": 400},
                              "unknownQueue": {"name": "QueueDoesNotExist", "status": 400},
                              "badHandle": {"name": "ReceiptHandleIsInvalid", "status": 400},
                              "signature": {"name": "SignatureDoesNotMatch", "status": 403}}
