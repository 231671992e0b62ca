"""Over SQS as over every other interface (issue 46): the plan's quotas and request rate refuse in SQS's words
(OverLimit, RequestThrottled) and change nothing; every request naming a queue is metered to it with its bytes;
management actions are in the tenant's audit log."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from botocore.exceptions import ClientError

from tests.sqs.conftest import aws_credentials, boto3_client
from tests.usage_records import usage_of_queue

pytestmark = pytest.mark.timeout(240)


def _refusal(call) -> ClientError:
    with pytest.raises(ClientError) as refused:
        call()
    return refused.value


def test_the_free_plan_refuses_a_queue_too_many_and_a_burst_of_requests_with_sqs_codes(plane):
    slug, key = plane.create_tenant(plan="free")  # 5 queues, 10 partitions, 50 requests/s
    sqs = boto3_client(plane, aws_credentials(plane, key), retries={"total_max_attempts": 1, "mode": "standard"},
                       max_pool_connections=16)
    made = []
    for i in range(6):
        try:
            made.append(sqs.create_queue(QueueName=f"jobs-{i}")["QueueUrl"])
        except ClientError as error:
            assert error.response["Error"]["Code"] == "OverLimit", error.response
            assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 403
            break
    else:
        pytest.fail("six queues of three partitions each fit a plan of 5 queues and 10 partitions")
    assert 1 <= len(made) < 6
    time.sleep(1.5)  # the request bucket refills
    assert sorted(sqs.list_queues(QueueNamePrefix="jobs-")["QueueUrls"]) == sorted(made)  # the refusal made nothing

    time.sleep(1.5)

    def ask(_):
        try:
            sqs.get_queue_attributes(QueueUrl=made[0], AttributeNames=["QueueArn"])
            return "ok"
        except ClientError as error:
            return error.response["Error"]["Code"], error.response["ResponseMetadata"]["HTTPStatusCode"]

    attempts = []
    sqs.meta.events.register("before-send.sqs.*", lambda **_: attempts.append(1))
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(ask, range(200)))
    throttled = [a for a in answers if a != "ok"]
    assert len(attempts) == 200, len(attempts)
    assert throttled, "200 requests at once exceed 50 requests/s"
    assert set(throttled) == {("RequestThrottled", 403)}
    with plane.client(key) as api:  # counted for the tenant as every interface's refusals are
        assert api.get("/api/v1/tenant").json()["throttled"]["last_hour"]["requests"] == len(throttled)


def test_every_request_naming_a_queue_is_metered_to_it_with_its_bytes(plane, tenant):
    sqs = boto3_client(plane, tenant[2])
    url = sqs.create_queue(QueueName="metered")["QueueUrl"]
    seen = {"requests": 0, "bytes_in": 0, "bytes_out": 0}

    def sent(request, **_):
        seen["requests"] += 1
        seen["bytes_in"] += len(request.body or b"")

    def answered(response_dict, **_):
        seen["bytes_out"] += len(response_dict["body"])

    sqs.meta.events.register("before-send.sqs.*", sent)
    sqs.meta.events.register("response-received.sqs.*", answered)
    for start in range(0, 30, 10):
        sqs.send_message_batch(QueueUrl=url, Entries=[
            {"Id": str(i), "MessageBody": f"parcel {i}", "MessageAttributes": {
                "weight": {"DataType": "Number", "StringValue": str(i)}}} for i in range(start, start + 10)])
    received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=2)["Messages"]
    sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]}
                                                     for n, m in enumerate(received)])
    sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])
    refused = _refusal(lambda: sqs.delete_message(QueueUrl=url, ReceiptHandle="not-a-handle"))
    assert refused.response["Error"]["Code"] == "ReceiptHandleIsInvalid"  # refused, and still the tenant's request
    assert seen["requests"] == 7

    got = usage_of_queue(plane.deployment.bootstrap, "metered", lambda got: got.get(
        "gateway_requests", 0) >= seen["requests"] and got.get("messages_in", 0) >= 30)
    assert {k: got.get(k) for k in ("gateway_requests", "gateway_bytes_in", "gateway_bytes_out")} == {
        "gateway_requests": seen["requests"], "gateway_bytes_in": seen["bytes_in"], "gateway_bytes_out": seen["bytes_out"]}
    assert got["messages_in"] == 30 and got["messages_out"] == 10  # the brokers' side


def test_management_over_sqs_is_in_the_audit_log(plane, tenant):
    _, key, credentials = tenant
    sqs = boto3_client(plane, credentials)
    url = sqs.create_queue(QueueName="audited", Attributes={"VisibilityTimeout": "40"})["QueueUrl"]
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "50"})
    sqs.send_message(QueueUrl=url, MessageBody="to be purged")
    sqs.purge_queue(QueueUrl=url)
    sqs.delete_queue(QueueUrl=url)
    with plane.client(key) as api:
        entries = [e for e in api.get("/api/v1/audit/", params={"limit": 500}).json() if e["target"] == "audited"]
    assert [e["action"] for e in reversed(entries)] == ["queue.create", "queue.update", "queue.purge", "queue.delete"]
    assert entries[1]["details"]["purged"] == 1
    assert len({e["actor"] for e in entries}) == 1
