"""boto3 (AWS JSON 1.0) against the SQS endpoint (issue 46): queues, batches with attributes and delays, long
polls from four workers, deletes in batches, visibility changes, counts that equal the truth, and SQS's errors."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time

import pytest
from botocore.exceptions import ClientError

from tests.sqs.conftest import boto3_client

pytestmark = pytest.mark.timeout(300)

MESSAGES = 1_000
WORKERS = 4


def _code(error: ClientError) -> str:
    return error.response["Error"]["Code"]


def _attributes(i: int) -> dict:
    return {"kind": {"DataType": "String", "StringValue": "order" if i % 2 else "refund"},
            "amount": {"DataType": "Number", "StringValue": str(i * 10)},
            "blob": {"DataType": "Binary", "BinaryValue": bytes([i % 256, 1, 2])}}


def _md5_of_attributes(attributes: dict) -> str:
    """SQS's published digest, computed here independently of the server's code."""
    digest = hashlib.md5()
    for name in sorted(attributes):
        value = attributes[name]
        for part in (name.encode(), value["DataType"].encode()):
            digest.update(len(part).to_bytes(4, "big") + part)
        if value["DataType"] == "Binary":
            data = value["BinaryValue"]
            digest.update(b"\x02" + len(data).to_bytes(4, "big") + data)
        else:
            data = value["StringValue"].encode()
            digest.update(b"\x01" + len(data).to_bytes(4, "big") + data)
    return digest.hexdigest()


def _counts(sqs, url: str) -> tuple[int, int, int]:
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return (int(attributes["ApproximateNumberOfMessages"]), int(attributes["ApproximateNumberOfMessagesNotVisible"]),
            int(attributes["ApproximateNumberOfMessagesDelayed"]))


def test_a_thousand_messages_in_batches_through_four_long_polling_workers(sqs):
    url = sqs.create_queue(QueueName="orders", Attributes={"VisibilityTimeout": "20", "ReceiveMessageWaitTimeSeconds": "2"},
                           tags={"team": "payments"})["QueueUrl"]
    assert url.endswith("/orders") and sqs.get_queue_url(QueueName="orders")["QueueUrl"] == url
    assert sqs.create_queue(QueueName="orders", Attributes={"VisibilityTimeout": "20"})["QueueUrl"] == url  # as SQS
    assert url in sqs.list_queues(QueueNamePrefix="ord")["QueueUrls"]
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "payments"}

    sent: dict[str, str] = {}  # message id -> body
    for start in range(0, MESSAGES, 10):
        entries = [{"Id": f"m{i}", "MessageBody": f"order {i}", "MessageAttributes": _attributes(i),
                    **({"DelaySeconds": 2} if i % 100 == 0 else {})} for i in range(start, start + 10)]
        answer = sqs.send_message_batch(QueueUrl=url, Entries=entries)
        assert not answer.get("Failed"), answer.get("Failed")
        for entry, result in zip(entries, sorted(answer["Successful"], key=lambda r: int(r["Id"][1:])), strict=True):
            assert result["MD5OfMessageBody"] == hashlib.md5(entry["MessageBody"].encode()).hexdigest()
            assert result["MD5OfMessageAttributes"] == _md5_of_attributes(entry["MessageAttributes"])
            sent[result["MessageId"]] = entry["MessageBody"]
    assert len(sent) == MESSAGES

    received: dict[str, str] = {}
    problems: list[str] = []
    lock = threading.Lock()

    def work() -> None:
        empty = 0
        while empty < 3:
            answer = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=2,
                                         MessageAttributeNames=["All"], AttributeNames=["ApproximateReceiveCount",
                                                                                        "SentTimestamp"])
            messages = answer.get("Messages", [])
            empty = 0 if messages else empty + 1
            for message in messages:
                i = int(message["Body"].split()[1])
                if message["MessageAttributes"] != _attributes(i):
                    problems.append(f"attributes of {i}: {message['MessageAttributes']}")
                if message["MD5OfBody"] != hashlib.md5(message["Body"].encode()).hexdigest():
                    problems.append(f"MD5OfBody of {i}")
                if message["MD5OfMessageAttributes"] != _md5_of_attributes(_attributes(i)):
                    problems.append(f"MD5OfMessageAttributes of {i}")
                if int(message["Attributes"]["SentTimestamp"]) > time.time() * 1000 + 5000:
                    problems.append(f"SentTimestamp of {i}")
            if messages:
                deleted = sqs.delete_message_batch(QueueUrl=url, Entries=[
                    {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(messages)])
                if deleted.get("Failed"):
                    problems.append(f"delete failed: {deleted['Failed']}")
                with lock:
                    received.update((m["MessageId"], m["Body"]) for m in messages)

    workers = [threading.Thread(target=work) for _ in range(WORKERS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(240)
    assert not problems, problems[:5]
    assert received == sent
    assert _counts(sqs, url) == (0, 0, 0)


def test_visibility_changes_and_the_counts_follow_the_queue(sqs):
    url = sqs.create_queue(QueueName="visibility", Attributes={"VisibilityTimeout": "30"})["QueueUrl"]
    for i in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=f"v{i}")
    sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=30)
    # Before any receive too, a message whose delivery time is to come counts as delayed.
    assert _counts(sqs, url) == (3, 0, 1)
    got = []
    deadline = time.monotonic() + 10
    while len(got) < 3 and time.monotonic() < deadline:
        got += sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                                   AttributeNames=["All"]).get("Messages", [])
    assert sorted(m["Body"] for m in got) == ["v0", "v1", "v2"]
    assert all(m["Attributes"]["ApproximateReceiveCount"] == "1" for m in got)

    def counts_become(expected) -> tuple:
        deadline = time.monotonic() + 10
        while _counts(sqs, url) != expected and time.monotonic() < deadline:
            time.sleep(0.2)
        return _counts(sqs, url)

    assert counts_become((0, 3, 1)) == (0, 3, 1)
    first = got[0]
    # Visible again at once, received a second time; then held 60 s more.
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0)
    assert counts_become((1, 2, 1)) == (1, 2, 1)
    again = None
    deadline = time.monotonic() + 10
    while again is None and time.monotonic() < deadline:
        for message in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"]).get("Messages", []):
            if message["MessageId"] == first["MessageId"]:
                again = message
    assert again is not None and again["Attributes"]["ApproximateReceiveCount"] == "2"
    results = sqs.change_message_visibility_batch(QueueUrl=url, Entries=[
        {"Id": "a", "ReceiptHandle": again["ReceiptHandle"], "VisibilityTimeout": 60},
        {"Id": "b", "ReceiptHandle": first["ReceiptHandle"], "VisibilityTimeout": 60}])  # an old delivery's handle
    assert [r["Id"] for r in results["Successful"]] == ["a"]
    assert [(r["Id"], r["Code"]) for r in results["Failed"]] == [("b", "AWS.SimpleQueueService.MessageNotInflight")]
    sqs.purge_queue(QueueUrl=url)
    sqs.delete_queue(QueueUrl=url)
    with pytest.raises(ClientError) as gone:
        sqs.get_queue_url(QueueName="visibility")
    assert _code(gone.value) == "AWS.SimpleQueueService.NonExistentQueue"


def test_sqs_errors_have_sqs_codes(plane, sqs, tenant):
    url = sqs.create_queue(QueueName="errors")["QueueUrl"]
    cases = [
        (lambda: sqs.send_message(QueueUrl=url.replace("/errors", "/nowhere"), MessageBody="x"),
         "AWS.SimpleQueueService.NonExistentQueue"),
        (lambda: sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=11), "InvalidParameterValue"),
        (lambda: sqs.send_message_batch(QueueUrl=url, Entries=[]), "AWS.SimpleQueueService.EmptyBatchRequest"),
        (lambda: sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "x"} for i in range(11)]),
         "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"),
        (lambda: sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "a", "MessageBody": "x"}] * 2),
         "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"),
        (lambda: sqs.delete_message(QueueUrl=url, ReceiptHandle="not-a-handle"), "ReceiptHandleIsInvalid"),
        (lambda: sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Colour"]), "InvalidAttributeName"),
        (lambda: sqs.create_queue(QueueName="errors", Attributes={"VisibilityTimeout": "99"}), "QueueAlreadyExists"),
        (lambda: sqs.create_queue(QueueName="bad name!"), "InvalidParameterValue"),
        (lambda: sqs.send_message(QueueUrl=url, MessageBody="x", MessageDeduplicationId="d"), "InvalidParameterValue"),
    ]
    for call, code in cases:
        with pytest.raises(ClientError) as refused:
            call()
        assert _code(refused.value) == code, refused.value.response
    wrong = boto3_client(plane, {**tenant[2], "secret_access_key": "x" * 40})
    with pytest.raises(ClientError) as refused:
        wrong.list_queues()
    assert _code(refused.value) == "SignatureDoesNotMatch" and refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    unknown = boto3_client(plane, {**tenant[2], "access_key_id": "TWAK000000000000"})
    with pytest.raises(ClientError) as refused:
        unknown.list_queues()
    assert _code(refused.value) == "InvalidClientTokenId"
    # Nothing was stored by any refusal.
    assert _counts(sqs, url) == (0, 0, 0)


def test_fifo_keeps_each_groups_order_and_drops_duplicates_within_the_window(sqs):
    with pytest.raises(ClientError) as refused:
        sqs.create_queue(QueueName="jobs", Attributes={"FifoQueue": "true"})
    assert _code(refused.value) == "InvalidParameterValue"  # a FIFO queue's name ends in .fifo
    url = sqs.create_queue(QueueName="jobs.fifo", Attributes={"FifoQueue": "true",
                                                               "ContentBasedDeduplication": "true"})["QueueUrl"]
    for i in range(30):
        sqs.send_message(QueueUrl=url, MessageBody=f"g{i % 3}-{i}", MessageGroupId=f"g{i % 3}")
    first = sqs.send_message(QueueUrl=url, MessageBody="once", MessageGroupId="g0", MessageDeduplicationId="only-once")
    second = sqs.send_message(QueueUrl=url, MessageBody="twice", MessageGroupId="g0", MessageDeduplicationId="only-once")
    assert second["MessageId"] == first["MessageId"]  # a duplicate answers as the first copy
    sqs.send_message(QueueUrl=url, MessageBody="g1-1", MessageGroupId="g1")  # the same body again: content dedup
    with pytest.raises(ClientError) as refused:
        sqs.send_message(QueueUrl=url, MessageBody="x")
    assert _code(refused.value) == "MissingParameter"
    by_group: dict[str, list[int]] = {}
    bodies = []
    deadline = time.monotonic() + 30
    while len(bodies) < 31 and time.monotonic() < deadline:
        answer = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1, AttributeNames=["All"])
        for message in answer.get("Messages", []):
            bodies.append(message["Body"])
            group = message["Attributes"]["MessageGroupId"]
            if message["Body"] != "once":
                by_group.setdefault(group, []).append(int(message["Body"].split("-")[1]))
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    assert sorted(bodies) == sorted([f"g{i % 3}-{i}" for i in range(30)] + ["once"])
    assert all(values == sorted(values) for values in by_group.values()), by_group


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


def test_messages_past_max_receive_count_go_to_the_dead_letter_queue_and_a_move_task_brings_them_back(sqs):
    dlq = sqs.create_queue(QueueName="jobs-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    policy = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 2}
    url = sqs.create_queue(QueueName="jobs", Attributes={"VisibilityTimeout": "1",
                                                         "RedrivePolicy": json.dumps(policy)})["QueueUrl"]
    shown = json.loads(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])["Attributes"]["RedrivePolicy"])
    assert shown == policy
    assert sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"] == [url]
    bodies = {f"job {i}" for i in range(20)}
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"job {i}"} for i in range(10)])
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"job {i}"} for i in range(10, 20)])
    # Received and never deleted: each comes back after its second second of invisibility, twice, then is dead.
    receives: dict[str, int] = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", [])
        for message in got:
            receives[message["Body"]] = receives.get(message["Body"], 0) + 1
        if not got and receives and all(count >= 2 for count in receives.values()) and len(receives) == 20:
            dead = _counts(sqs, dlq)[0]
            if dead == 20:
                break
    assert receives == {body: 2 for body in bodies}, receives
    assert _counts(sqs, dlq) == (20, 0, 0) and _counts(sqs, url) == (0, 0, 0)

    task = sqs.start_message_move_task(SourceArn=dlq_arn, MaxNumberOfMessagesPerSecond=50)["TaskHandle"]
    assert task
    deadline = time.monotonic() + 60
    status = None
    while time.monotonic() < deadline:
        [status] = sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"]
        if status["Status"] != "RUNNING":
            break
        time.sleep(0.5)
    assert status["Status"] == "COMPLETED" and status["ApproximateNumberOfMessagesMoved"] == 20, status
    assert status["ApproximateNumberOfMessagesToMove"] == 20
    back = set()
    deadline = time.monotonic() + 30
    while back != bodies and time.monotonic() < deadline:
        for message in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", []):
            back.add(message["Body"])
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    assert back == bodies
    assert _counts(sqs, dlq) == (0, 0, 0)
    with pytest.raises(ClientError) as refused:  # not a dead-letter queue of any queue
        sqs.start_message_move_task(SourceArn=dlq_arn.replace("jobs-dlq", "jobs"))
    assert _code(refused.value) == "InvalidParameterValue"
