"""The SQS scenario of issue 46, in plain Python on a boto3 client, so that the same steps run with today's boto3
(AWS JSON 1.0, tests/sqs/test_boto3.py) and with Debian's python3-boto3 1.26, which speaks the query protocol, in
Debian's own Python outside the virtualenv (tests/sqs/query_scenario.py). Only boto3 and the standard library.

Each step asserts what a user of SQS would see; ``prefix`` keeps the two runs' queues apart in one tenant.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ElementTree

from botocore.exceptions import ClientError

MESSAGES = 1_000
WORKERS = 4


def code_of(call) -> str:
    """The SQS error code ``call`` is refused with (it must be refused)."""
    try:
        call()
    except ClientError as error:
        return error.response["Error"]["Code"]
    raise AssertionError("the call was not refused")


def attributes_of(i: int) -> dict:
    return {"kind": {"DataType": "String", "StringValue": "order" if i % 2 else "refund"},
            "amount": {"DataType": "Number", "StringValue": str(i * 10)},
            "blob": {"DataType": "Binary", "BinaryValue": bytes([i % 256, 1, 2])}}


def md5_of_attributes(attributes: dict) -> str:
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


def counts(sqs, url: str) -> tuple[int, int, int]:
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return (int(attributes["ApproximateNumberOfMessages"]), int(attributes["ApproximateNumberOfMessagesNotVisible"]),
            int(attributes["ApproximateNumberOfMessagesDelayed"]))


def counts_become(sqs, url: str, expected: tuple) -> tuple:
    deadline = time.monotonic() + 10
    while counts(sqs, url) != expected and time.monotonic() < deadline:
        time.sleep(0.2)
    return counts(sqs, url)


def a_thousand_messages_through_four_long_polling_workers(sqs, prefix: str = "") -> None:
    name = f"{prefix}orders"
    url = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "20", "ReceiveMessageWaitTimeSeconds": "2"},
                           tags={"team": "payments"})["QueueUrl"]
    assert url.endswith(f"/{name}") and sqs.get_queue_url(QueueName=name)["QueueUrl"] == url
    assert sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "20"})["QueueUrl"] == url  # as SQS
    assert url in sqs.list_queues(QueueNamePrefix=name[:3])["QueueUrls"]
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "payments"}

    sent: dict[str, str] = {}  # message id -> body
    for start in range(0, MESSAGES, 10):
        entries = [{"Id": f"m{i}", "MessageBody": f"order {i}", "MessageAttributes": attributes_of(i),
                    **({"DelaySeconds": 2} if i % 100 == 0 else {})} for i in range(start, start + 10)]
        answer = sqs.send_message_batch(QueueUrl=url, Entries=entries)
        assert not answer.get("Failed"), answer.get("Failed")
        for entry, result in zip(entries, sorted(answer["Successful"], key=lambda r: int(r["Id"][1:])), strict=True):
            assert result["MD5OfMessageBody"] == hashlib.md5(entry["MessageBody"].encode()).hexdigest()
            assert result["MD5OfMessageAttributes"] == md5_of_attributes(entry["MessageAttributes"])
            sent[result["MessageId"]] = entry["MessageBody"]
    assert len(sent) == MESSAGES

    received: dict[str, str] = {}
    problems: list[str] = []
    lock = threading.Lock()

    def work() -> None:
        try:
            receive_and_delete()
        except Exception as exc:  # noqa: BLE001 - a worker's failure fails the scenario
            problems.append(f"a worker failed: {exc!r}")

    def receive_and_delete() -> None:
        empty = 0
        while empty < 3:
            answer = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=2,
                                         MessageAttributeNames=["All"],
                                         AttributeNames=["ApproximateReceiveCount", "SentTimestamp"])
            messages = answer.get("Messages", [])
            empty = 0 if messages else empty + 1
            for message in messages:
                i = int(message["Body"].split()[1])
                if message["MessageAttributes"] != attributes_of(i):
                    problems.append(f"attributes of {i}: {message['MessageAttributes']}")
                if message["MD5OfBody"] != hashlib.md5(message["Body"].encode()).hexdigest():
                    problems.append(f"MD5OfBody of {i}")
                if message["MD5OfMessageAttributes"] != md5_of_attributes(attributes_of(i)):
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
    assert counts(sqs, url) == (0, 0, 0)


def visibility_changes_and_the_counts_follow_the_queue(sqs, prefix: str = "") -> None:
    name = f"{prefix}visibility"
    url = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "30"})["QueueUrl"]
    for i in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=f"v{i}")
    sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=30)
    # Before any receive too, a message whose delivery time is to come counts as delayed.
    assert counts(sqs, url) == (3, 0, 1)
    got = []
    deadline = time.monotonic() + 10
    while len(got) < 3 and time.monotonic() < deadline:
        got += sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                                   AttributeNames=["All"]).get("Messages", [])
    assert sorted(m["Body"] for m in got) == ["v0", "v1", "v2"]
    assert all(m["Attributes"]["ApproximateReceiveCount"] == "1" for m in got)
    assert counts_become(sqs, url, (0, 3, 1)) == (0, 3, 1)
    first = got[0]
    # Visible again at once, received a second time; then held 60 s more.
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0)
    assert counts_become(sqs, url, (1, 2, 1)) == (1, 2, 1)
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
    assert counts_become(sqs, url, (0, 0, 0)) == (0, 0, 0)
    sqs.delete_queue(QueueUrl=url)
    assert code_of(lambda: sqs.get_queue_url(QueueName=name)) == "AWS.SimpleQueueService.NonExistentQueue"


def errors_have_sqs_codes(sqs, wrong_secret, unknown_key, prefix: str = "") -> None:
    """``wrong_secret``: a client with the right access key id and another secret; ``unknown_key``: one whose
    access key id names no key."""
    name = f"{prefix}errors"
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    cases = [
        (lambda: sqs.send_message(QueueUrl=url.replace(f"/{name}", "/nowhere"), MessageBody="x"),
         "AWS.SimpleQueueService.NonExistentQueue"),
        (lambda: sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=11), "InvalidParameterValue"),
        (lambda: sqs.send_message_batch(QueueUrl=url, Entries=[]), "AWS.SimpleQueueService.EmptyBatchRequest"),
        (lambda: sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "x"} for i in range(11)]),
         "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"),
        (lambda: sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "a", "MessageBody": "x"}] * 2),
         "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"),
        (lambda: sqs.delete_message(QueueUrl=url, ReceiptHandle="not-a-handle"), "ReceiptHandleIsInvalid"),
        (lambda: sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Colour"]), "InvalidAttributeName"),
        (lambda: sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "99"}), "QueueAlreadyExists"),
        (lambda: sqs.create_queue(QueueName="bad name!"), "InvalidParameterValue"),
        (lambda: sqs.send_message(QueueUrl=url, MessageBody="x", MessageDeduplicationId="d"), "InvalidParameterValue"),
        (lambda: wrong_secret.list_queues(), "SignatureDoesNotMatch"),
        (lambda: unknown_key.list_queues(), "InvalidClientTokenId"),
    ]
    for call, code in cases:
        assert code_of(call) == code, code
    # Nothing was stored by any refusal.
    assert counts(sqs, url) == (0, 0, 0)
    sqs.delete_queue(QueueUrl=url)


def fifo_keeps_each_groups_order_and_drops_duplicates(sqs, prefix: str = "") -> None:
    assert code_of(lambda: sqs.create_queue(QueueName=f"{prefix}jobs", Attributes={"FifoQueue": "true"})) == \
        "InvalidParameterValue"  # a FIFO queue's name ends in .fifo
    url = sqs.create_queue(QueueName=f"{prefix}jobs.fifo", Attributes={
        "FifoQueue": "true", "ContentBasedDeduplication": "true"})["QueueUrl"]
    for i in range(30):
        sqs.send_message(QueueUrl=url, MessageBody=f"g{i % 3}-{i}", MessageGroupId=f"g{i % 3}")
    first = sqs.send_message(QueueUrl=url, MessageBody="once", MessageGroupId="g0", MessageDeduplicationId="only-once")
    second = sqs.send_message(QueueUrl=url, MessageBody="twice", MessageGroupId="g0", MessageDeduplicationId="only-once")
    assert second["MessageId"] == first["MessageId"]  # a duplicate answers as the first copy
    sqs.send_message(QueueUrl=url, MessageBody="g1-1", MessageGroupId="g1")  # the same body again: content dedup
    assert code_of(lambda: sqs.send_message(QueueUrl=url, MessageBody="x")) == "MissingParameter"
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
    assert counts(sqs, url) == (0, 0, 0)


def dead_letters_and_a_move_task_back(sqs, prefix: str = "") -> None:
    dlq = sqs.create_queue(QueueName=f"{prefix}jobs-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    policy = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 2}
    url = sqs.create_queue(QueueName=f"{prefix}jobs-main", Attributes={
        "VisibilityTimeout": "1", "RedrivePolicy": json.dumps(policy)})["QueueUrl"]
    shown = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])["Attributes"]["RedrivePolicy"]
    assert json.loads(shown) == policy
    assert sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"] == [url]
    bodies = {f"job {i}" for i in range(20)}
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"job {i}"} for i in range(10)])
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"job {i}"} for i in range(10, 20)])
    # Received and never deleted: each comes back after its second of invisibility, twice, then is dead.
    receives: dict[str, int] = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", [])
        for message in got:
            receives[message["Body"]] = receives.get(message["Body"], 0) + 1
        if not got and len(receives) == 20 and all(count >= 2 for count in receives.values()):
            if counts(sqs, dlq)[0] == 20:
                break
    assert receives == {body: 2 for body in bodies}, receives
    assert counts(sqs, dlq) == (20, 0, 0) and counts(sqs, url) == (0, 0, 0)

    moves = MoveTasks(sqs)
    assert moves.start(dlq_arn)
    deadline = time.monotonic() + 60
    status = None
    while time.monotonic() < deadline:
        [status] = moves.list(dlq_arn)
        if status["Status"] != "RUNNING":
            break
        time.sleep(0.5)
    assert status["Status"] == "COMPLETED" and int(status["ApproximateNumberOfMessagesMoved"]) == 20, status
    assert int(status["ApproximateNumberOfMessagesToMove"]) == 20
    back = set()
    deadline = time.monotonic() + 30
    while back != bodies and time.monotonic() < deadline:
        for message in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", []):
            back.add(message["Body"])
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    assert back == bodies
    assert counts(sqs, dlq) == (0, 0, 0)
    # Not a dead-letter queue of any queue.
    assert moves.refusal(dlq_arn.replace(f"{prefix}jobs-dlq", f"{prefix}jobs-main")) == "InvalidParameterValue"


class MoveTasks:
    """StartMessageMoveTask and ListMessageMoveTasks (2023): through the client where it has them; else (botocore
    1.29) as the query protocol's requests, signed with the client's own credentials and signer."""

    def __init__(self, sqs) -> None:
        self.sqs = sqs
        self.native = hasattr(sqs, "start_message_move_task")

    def start(self, source_arn: str) -> str:
        if self.native:
            return self.sqs.start_message_move_task(SourceArn=source_arn, MaxNumberOfMessagesPerSecond=50)["TaskHandle"]
        return self._query("StartMessageMoveTask", SourceArn=source_arn, MaxNumberOfMessagesPerSecond="50") \
            .findtext(".//{*}TaskHandle")

    def list(self, source_arn: str) -> list[dict]:
        if self.native:
            return self.sqs.list_message_move_tasks(SourceArn=source_arn)["Results"]
        found = self._query("ListMessageMoveTasks", SourceArn=source_arn)
        return [{child.tag.split("}")[1]: child.text for child in entry}
                for entry in found.iter("{http://queue.amazonaws.com/doc/2012-11-05/}ListMessageMoveTasksResultEntry")]

    def refusal(self, source_arn: str) -> str:
        if self.native:
            return code_of(lambda: self.sqs.start_message_move_task(SourceArn=source_arn))
        try:
            self._query("StartMessageMoveTask", SourceArn=source_arn)
        except urllib.error.HTTPError as error:
            return ElementTree.fromstring(error.read()).findtext(".//{*}Code")
        raise AssertionError("the move task was not refused")

    def _query(self, action: str, **params) -> ElementTree.Element:
        from urllib.parse import urlencode

        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        body = urlencode({"Action": action, "Version": "2012-11-05", **params})
        request = AWSRequest(method="POST", url=self.sqs.meta.endpoint_url, data=body,
                             headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"})
        SigV4Auth(self.sqs._request_signer._credentials.get_frozen_credentials(), "sqs",
                  self.sqs.meta.region_name).add_auth(request)
        prepared = urllib.request.Request(self.sqs.meta.endpoint_url, data=body.encode(), method="POST",
                                          headers=dict(request.headers))
        with urllib.request.urlopen(prepared, timeout=30) as answer:
            return ElementTree.fromstring(answer.read())
