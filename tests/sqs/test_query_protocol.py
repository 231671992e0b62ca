"""SQS's query protocol (issue 46), spoken by the SDK that speaks it: Debian's python3-boto3 1.26, run outside
the virtualenv (tests/sqs/query_scenario.py). XML answers, flattened lists and maps, legacy error codes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(180)

DEBIAN_PYTHON = "/usr/bin/python3"


def _debian_boto3() -> str | None:
    if not Path(DEBIAN_PYTHON).exists():
        return f"{DEBIAN_PYTHON} is missing"
    found = subprocess.run([DEBIAN_PYTHON, "-c", "import boto3"], capture_output=True, text=True)
    return None if found.returncode == 0 else "Debian's python3-boto3 is not installed (infra/setup.sh installs it)"


@pytest.mark.skipif(_debian_boto3() is not None, reason=str(_debian_boto3()))
def test_debians_boto3_speaks_the_query_protocol_to_the_endpoint(plane, tenant):
    credentials = tenant[2]
    run = subprocess.run([DEBIAN_PYTHON, str(Path(__file__).with_name("query_scenario.py")), plane.base_url + "/sqs",
                          credentials["region"], credentials["access_key_id"], credentials["secret_access_key"]],
                         capture_output=True, text=True, timeout=150)
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout)
    assert seen["protocol"] == "query" and seen["botocore"].startswith("1.29")
    assert seen["url"].endswith("/query-orders") and seen["listed"] == [seen["url"]]
    assert seen["sent"] == sorted(f"m{i}" for i in range(10))
    assert [r["body"] for r in seen["received"]] == sorted(f"query {i} <&>" for i in range(10))
    assert all(r["kind"] == "order" and r["receives"] == "1" for r in seen["received"])
    assert sorted(int(r["amount"]) for r in seen["received"]) == list(range(10))
    assert sorted(r["blob"][0] for r in seen["received"]) == list(range(10))
    assert seen["attributes"]["VisibilityTimeout"] == "20" and seen["attributes"]["ApproximateNumberOfMessages"] == "0"
    assert seen["tags"] == {"team": "old-sdk"}
    assert seen["errors"] == {"unknown_queue": ["AWS.SimpleQueueService.NonExistentQueue", 400],
                              "bad_max": ["InvalidParameterValue", 400],
                              "empty_batch": ["AWS.SimpleQueueService.EmptyBatchRequest", 400],
                              "bad_attribute": ["InvalidAttributeName", 400]}
