"""boto3 (AWS JSON 1.0) against the SQS endpoint (issue 46): the scenario of tests/sqs/scenario.py (queues, batches
with attributes and delays, long polls from four workers, deletes in batches, visibility changes, dead letters and
a move task back, FIFO order and deduplication, counts that equal the truth, SQS's errors), tenants kept apart, and
signatures that bind the body."""

from __future__ import annotations

import base64
import time

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.sqs import scenario
from tests.sqs.conftest import boto3_client

pytestmark = pytest.mark.timeout(300)


def _code(error: ClientError) -> str:
    return error.response["Error"]["Code"]


def test_a_thousand_messages_in_batches_through_four_long_polling_workers(sqs):
    scenario.a_thousand_messages_through_four_long_polling_workers(sqs)


def test_visibility_changes_and_the_counts_follow_the_queue(sqs):
    scenario.visibility_changes_and_the_counts_follow_the_queue(sqs)


def test_sqs_errors_have_sqs_codes(plane, sqs, tenant):
    credentials = tenant[2]
    scenario.errors_have_sqs_codes(sqs, boto3_client(plane, {**credentials, "secret_access_key": "x" * 40}),
                                   boto3_client(plane, {**credentials, "access_key_id": "TWAK000000000000"}))


def test_fifo_keeps_each_groups_order_and_drops_duplicates_within_the_window(sqs):
    scenario.fifo_keeps_each_groups_order_and_drops_duplicates(sqs)


def test_messages_past_max_receive_count_go_to_the_dead_letter_queue_and_a_move_task_brings_them_back(sqs):
    scenario.dead_letters_and_a_move_task_back(sqs)


def test_another_tenant_cannot_see_or_touch_the_queues(plane, sqs):
    from tests.sqs.conftest import aws_credentials

    url = sqs.create_queue(QueueName="private")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="secret")
    _slug, other_key = plane.create_tenant(plan="team")
    other = boto3_client(plane, aws_credentials(plane, other_key))
    assert url not in other.list_queues().get("QueueUrls", [])
    for call in (lambda: other.get_queue_url(QueueName="private", QueueOwnerAWSAccountId=url.split("/")[-2]),
                 lambda: other.receive_message(QueueUrl=url), lambda: other.send_message(QueueUrl=url, MessageBody="x"),
                 lambda: other.purge_queue(QueueUrl=url), lambda: other.delete_queue(QueueUrl=url),
                 lambda: other.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])):
        with pytest.raises(ClientError) as refused:
            call()
        assert _code(refused.value) == "AWS.SimpleQueueService.NonExistentQueue"
    assert [m["Body"] for m in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2)["Messages"]] == ["secret"]


def test_a_signature_over_a_changed_body_is_refused(plane, tenant):
    import httpx
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    credentials = tenant[2]
    body = b'{"QueueNamePrefix": ""}'
    request = AWSRequest(method="POST", url=plane.base_url + "/sqs/", data=body, headers={
        "Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.ListQueues"})
    SigV4Auth(Credentials(credentials["access_key_id"], credentials["secret_access_key"]), "sqs",
              credentials["region"]).add_auth(request)
    headers = dict(request.headers)
    assert httpx.post(plane.base_url + "/sqs/", content=body, headers=headers).status_code == 200
    changed = httpx.post(plane.base_url + "/sqs/", content=body.replace(b'""', b'"x"'), headers=headers)
    assert changed.status_code == 403 and changed.headers["x-amzn-query-error"].startswith("SignatureDoesNotMatch;")


def test_revoking_the_key_or_its_aws_credentials_stops_them(plane):
    from tests.sqs.conftest import aws_credentials

    _slug, key = plane.create_tenant(plan="team")
    credentials = aws_credentials(plane, key)
    client = boto3_client(plane, credentials)
    client.list_queues()
    prefix = key.split("_")[1]
    with plane.client(key) as api:
        listed = {k["prefix"]: k for k in api.get("/api/v1/keys/").json()}
        assert listed[prefix]["aws_access_key_id"] == credentials["access_key_id"]
        assert api.delete(f"/api/v1/keys/{prefix}/aws-credentials").status_code == 204
    deadline = time.monotonic() + 10
    code = None
    while code != "InvalidClientTokenId" and time.monotonic() < deadline:
        try:
            client.list_queues()
        except ClientError as exc:
            code = _code(exc)
        time.sleep(0.5)
    assert code == "InvalidClientTokenId"
    # Issued again: a new secret (the old one stays refused).
    renewed = aws_credentials(plane, key)
    assert renewed["secret_access_key"] != credentials["secret_access_key"]
    time.sleep(4)
    boto3_client(plane, renewed).list_queues()
    base64.b64decode(renewed["secret_access_key"] + "==")


def test_a_client_whose_endpoint_is_the_host_alone_is_served_too(plane, tenant, sqs):
    """kombu's SQS transport (Celery) builds its endpoint from a host and port: POST / signed for SQS."""
    root = boto3.client("sqs", endpoint_url=plane.base_url, region_name=tenant[2]["region"],
                        aws_access_key_id=tenant[2]["access_key_id"],
                        aws_secret_access_key=tenant[2]["secret_access_key"])
    url = root.create_queue(QueueName="at-the-root")["QueueUrl"]
    assert url == sqs.get_queue_url(QueueName="at-the-root")["QueueUrl"] and "/sqs/" in url
    root.send_message(QueueUrl=url, MessageBody="hello")
    assert [m["Body"] for m in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2)["Messages"]] == ["hello"]
    # Anything else at the root is not SQS's: the console answers it as before (SQS's answers carry a request id).
    with plane.client() as anonymous:
        unsigned = anonymous.post("/", content=b"Action=ListQueues")
    assert unsigned.status_code != 200 and "x-amzn-requestid" not in unsigned.headers, unsigned.headers
    root.delete_queue(QueueUrl=url)
