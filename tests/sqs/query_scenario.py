"""The scenario of tests/sqs/scenario.py in SQS's query protocol, run by Debian's python3-boto3 1.26 (botocore 1.29
sends the query protocol): ``/usr/bin/python3 tests/sqs/query_scenario.py ENDPOINT REGION ACCESS_KEY_ID SECRET``.
Prints one JSON object: the protocol, botocore's version, and each step's outcome ("ok" or its failure).
Not imported by the suite: it runs outside the virtualenv (tests/sqs/test_query_protocol.py runs it)."""

import json
import sys
import traceback
from pathlib import Path

import boto3
import botocore

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.sqs import scenario  # noqa: E402

PREFIX = "query-"


def main() -> None:
    endpoint, region, access_key, secret = sys.argv[1:5]

    def client(key: str = access_key, secret_key: str = secret):
        return boto3.client("sqs", endpoint_url=endpoint, region_name=region, aws_access_key_id=key,
                            aws_secret_access_key=secret_key)

    sqs = client()
    steps = {
        "thousand": lambda: scenario.a_thousand_messages_through_four_long_polling_workers(sqs, PREFIX),
        "visibility": lambda: scenario.visibility_changes_and_the_counts_follow_the_queue(sqs, PREFIX),
        "errors": lambda: scenario.errors_have_sqs_codes(sqs, client(secret_key="x" * 40),
                                                         client(key="TWAK000000000000"), PREFIX),
        "fifo": lambda: scenario.fifo_keeps_each_groups_order_and_drops_duplicates(sqs, PREFIX),
        "dead_letters": lambda: scenario.dead_letters_and_a_move_task_back(sqs, PREFIX),
    }
    seen = {"botocore": botocore.__version__, "protocol": sqs.meta.service_model.protocol, "steps": {}}
    for name, step in steps.items():
        try:
            step()
            seen["steps"][name] = "ok"
        except Exception:  # noqa: BLE001 - reported to the test
            seen["steps"][name] = traceback.format_exc()[-2000:]
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
