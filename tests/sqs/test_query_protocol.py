"""SQS's query protocol (issue 46), spoken by the SDK that speaks it: Debian's python3-boto3 1.26 runs the whole
scenario of tests/sqs/scenario.py outside the virtualenv (tests/sqs/query_scenario.py): XML answers, flattened
lists and maps, legacy error codes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

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
                         capture_output=True, text=True, timeout=280)
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout)
    assert seen["protocol"] == "query" and seen["botocore"].startswith("1.29")
    failed = {step: outcome for step, outcome in seen["steps"].items() if outcome != "ok"}
    assert not failed, "\n".join(f"{step}:\n{outcome}" for step, outcome in failed.items())
    assert sorted(seen["steps"]) == ["dead_letters", "errors", "fifo", "thousand", "visibility"]
