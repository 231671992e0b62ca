"""One SQS scenario that records what a user of the API sees at each step (status, error code, counts, the sets
of names in answers), to run against Tideway and against a reference server and compare (test_against_moto.py).

Only what both servers are meant to agree on is recorded: not ids, handles, timestamps or ARNs' account parts.
"""

from __future__ import annotations

import hashlib
import json
import time

from botocore.exceptions import ClientError

ATTRIBUTES = {"kind": {"DataType": "String", "StringValue": "order"},
              "amount": {"DataType": "Number", "StringValue": "42"},
              "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01"}}


def _call(transcript: list, step: str, call, shape=lambda answer: None):
    """Run ``call``; record the step's status, error code and ``shape`` of the answer."""
    try:
        answer = call()
    except ClientError as error:
        transcript.append((step, error.response["ResponseMetadata"]["HTTPStatusCode"], error.response["Error"]["Code"],
                           None))
        return None
    transcript.append((step, answer["ResponseMetadata"]["HTTPStatusCode"], None, shape(answer)))
    return answer


def _counts(sqs, url: str) -> tuple[int, int, int]:
    found = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return (int(found["ApproximateNumberOfMessages"]), int(found["ApproximateNumberOfMessagesNotVisible"]),
            int(found["ApproximateNumberOfMessagesDelayed"]))


def run(sqs, prefix: str) -> list[tuple]:
    """The scenario on ``sqs`` (a boto3 client), queues named ``prefix``-*; its transcript."""
    t: list[tuple] = []
    dlq = _call(t, "create the dead-letter queue", lambda: sqs.create_queue(QueueName=f"{prefix}-dlq"))["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    policy = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "2"})
    url = _call(t, "create the queue", lambda: sqs.create_queue(
        QueueName=f"{prefix}-main", Attributes={"VisibilityTimeout": "30", "RedrivePolicy": policy},
        tags={"team": "payments"}))["QueueUrl"]
    _call(t, "create it again with other attributes", lambda: sqs.create_queue(
        QueueName=f"{prefix}-main", Attributes={"VisibilityTimeout": "40"}))
    _call(t, "create a queue with a bad name", lambda: sqs.create_queue(QueueName="bad name!"))
    _call(t, "create a queue with a bad attribute value", lambda: sqs.create_queue(
        QueueName=f"{prefix}-bad", Attributes={"VisibilityTimeout": "-5"}))
    _call(t, "get the queue's URL", lambda: sqs.get_queue_url(QueueName=f"{prefix}-main"),
          lambda a: a["QueueUrl"] == url)
    _call(t, "get an unknown queue's URL", lambda: sqs.get_queue_url(QueueName=f"{prefix}-nowhere"))
    _call(t, "list the queues", lambda: sqs.list_queues(QueueNamePrefix=prefix),
          lambda a: sorted(u.rsplit("/", 1)[1] for u in a["QueueUrls"]))
    _call(t, "list the tags", lambda: sqs.list_queue_tags(QueueUrl=url), lambda a: a["Tags"])
    _call(t, "tag", lambda: sqs.tag_queue(QueueUrl=url, Tags={"env": "test"}))
    _call(t, "untag", lambda: sqs.untag_queue(QueueUrl=url, TagKeys=["team"]))
    _call(t, "list the tags again", lambda: sqs.list_queue_tags(QueueUrl=url), lambda a: a["Tags"])
    _call(t, "set an unknown attribute", lambda: sqs.set_queue_attributes(QueueUrl=url, Attributes={"Colour": "red"}))
    _call(t, "set the visibility timeout", lambda: sqs.set_queue_attributes(
        QueueUrl=url, Attributes={"VisibilityTimeout": "20"}))
    _call(t, "read it back", lambda: sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout"]),
          lambda a: a["Attributes"])

    entries = [{"Id": f"m{i}", "MessageBody": f"order {i}", "MessageAttributes": ATTRIBUTES} for i in range(10)]
    _call(t, "send a batch of 10", lambda: sqs.send_message_batch(QueueUrl=url, Entries=entries),
          lambda a: (sorted(r["Id"] for r in a["Successful"]), a.get("Failed", []),
                     all(r["MD5OfMessageBody"] == hashlib.md5(f"order {r['Id'][1:]}".encode()).hexdigest()
                         for r in a["Successful"])))
    _call(t, "send a delayed message", lambda: sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=60),
          lambda a: sorted(a) == sorted(["MD5OfMessageBody", "MessageId", "ResponseMetadata"]))
    _call(t, "send a batch of 11", lambda: sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": f"x{i}", "MessageBody": "x"} for i in range(11)]))
    _call(t, "send a batch with a repeated id", lambda: sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": "same", "MessageBody": "x"}, {"Id": "same", "MessageBody": "y"}]))
    _call(t, "send to an unknown queue", lambda: sqs.send_message(
        QueueUrl=url.rsplit("/", 1)[0] + f"/{prefix}-nowhere", MessageBody="x"))
    _call(t, "send with a delay over 15 minutes", lambda: sqs.send_message(QueueUrl=url, MessageBody="x",
                                                                           DelaySeconds=901))
    t.append(("counts after sending", _counts(sqs, url)))

    received = _call(t, "receive 10 with every attribute", lambda: sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1, AttributeNames=["All"],
        MessageAttributeNames=["All"]), lambda a: (len(a["Messages"]), sorted({
            k for m in a["Messages"] for k in m}), sorted({k for m in a["Messages"] for k in m["MessageAttributes"]}),
            all(m["MessageAttributes"] == ATTRIBUTES for m in a["Messages"])))
    messages = received["Messages"]
    t.append(("counts while they are in flight", _counts(sqs, url)))
    _call(t, "receive more than 10", lambda: sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=11))
    _call(t, "make one visible again", lambda: sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=messages[0]["ReceiptHandle"], VisibilityTimeout=0))
    _call(t, "change the visibility with a bad handle", lambda: sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle="nonsense", VisibilityTimeout=10))
    t.append(("counts after one went back", _counts(sqs, url)))
    _call(t, "delete 9 and a bad handle", lambda: sqs.delete_message_batch(QueueUrl=url, Entries=[
        {"Id": f"d{n}", "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(messages[1:])] + [
        {"Id": "bad", "ReceiptHandle": "nonsense"}]),
        lambda a: (len(a["Successful"]), [(f["Id"], f["Code"], f["SenderFault"]) for f in a.get("Failed", [])]))
    _call(t, "delete an empty batch", lambda: sqs.delete_message_batch(QueueUrl=url, Entries=[]))
    t.append(("counts after deleting", _counts(sqs, url)))

    _call(t, "the dead-letter queue's sources", lambda: sqs.list_dead_letter_source_queues(QueueUrl=dlq),
          lambda a: [u.rsplit("/", 1)[1] for u in a["queueUrls"]])
    _call(t, "purge", lambda: sqs.purge_queue(QueueUrl=url))
    deadline = time.monotonic() + 10
    while _counts(sqs, url) != (0, 0, 0) and time.monotonic() < deadline:
        time.sleep(0.2)
    t.append(("counts after purging", _counts(sqs, url)))

    fifo = _call(t, "create a FIFO queue", lambda: sqs.create_queue(
        QueueName=f"{prefix}-orders.fifo", Attributes={"FifoQueue": "true"}))["QueueUrl"]
    _call(t, "send to it without a group", lambda: sqs.send_message(QueueUrl=fifo, MessageBody="x",
                                                                     MessageDeduplicationId="a"))
    _call(t, "send to it without a deduplication id", lambda: sqs.send_message(QueueUrl=fifo, MessageBody="x",
                                                                               MessageGroupId="g"))
    first = _call(t, "send to it", lambda: sqs.send_message(QueueUrl=fifo, MessageBody="one", MessageGroupId="g",
                                                            MessageDeduplicationId="d1"),
                  lambda a: "SequenceNumber" in a)
    _call(t, "send the same deduplication id again", lambda: sqs.send_message(
        QueueUrl=fifo, MessageBody="one again", MessageGroupId="g", MessageDeduplicationId="d1"),
        lambda a: a["MessageId"] == first["MessageId"])
    _call(t, "receive from it", lambda: sqs.receive_message(QueueUrl=fifo, MaxNumberOfMessages=10, WaitTimeSeconds=1),
          lambda a: [m["Body"] for m in a["Messages"]])
    _call(t, "create a FIFO queue without .fifo", lambda: sqs.create_queue(
        QueueName=f"{prefix}-plain", Attributes={"FifoQueue": "true"}))

    _call(t, "delete the queue", lambda: sqs.delete_queue(QueueUrl=url))
    _call(t, "get its URL after", lambda: sqs.get_queue_url(QueueName=f"{prefix}-main"))
    return t
