"""The same queues everywhere (issue 46): a queue made over SQS is a Tideway queue, and the other way round; a
message sent over SQS is received over REST (group ``sqs``) with its attributes as headers, and the other way."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.timeout(120)


def test_messages_cross_between_sqs_and_rest_with_attributes_as_headers(plane, tenant, sqs):
    _slug, key, _credentials = tenant
    url = sqs.create_queue(QueueName="shared-sqs")["QueueUrl"]
    with plane.client(key) as api:
        assert "shared-sqs" in [q["name"] for q in api.get("/api/v1/queues/").json()]
        made = api.post("/api/v1/queues/", json={"name": "shared-rest", "mode": "queue", "partitions": 2})
        assert made.status_code == 201, made.text
        stream = api.post("/api/v1/queues/", json={"name": "a-stream", "mode": "stream"})
        assert stream.status_code == 201, stream.text
    urls = sqs.list_queues()["QueueUrls"]
    assert any(u.endswith("/shared-rest") for u in urls) and not any(u.endswith("/a-stream") for u in urls)

    sqs.send_message(QueueUrl=url, MessageBody="from sqs", MessageAttributes={
        "colour": {"DataType": "String", "StringValue": "blue"}, "size": {"DataType": "Number", "StringValue": "3"}})
    with plane.client(key) as api:
        got = api.post("/api/v1/queues/shared-sqs/groups/sqs/receive", json={"wait_seconds": 5}).json()["messages"]
        assert [m["value"] for m in got] == ["from sqs"]
        assert got[0]["headers"]["colour"] == "blue" and got[0]["headers"]["size"] == "3"
        assert api.post("/api/v1/queues/shared-sqs/groups/sqs/ack",
                        json={"receipts": [got[0]["receipt"]]}).status_code == 200
        published = api.post("/api/v1/queues/shared-rest/messages",
                             json={"messages": [{"value": "from rest", "headers": {"origin": "rest"}}]})
        assert published.status_code == 200, published.text
    rest_url = next(u for u in urls if u.endswith("/shared-rest"))
    received = sqs.receive_message(QueueUrl=rest_url, WaitTimeSeconds=5, MessageAttributeNames=["All"])["Messages"]
    assert [m["Body"] for m in received] == ["from rest"]
    assert received[0]["MessageAttributes"] == {"origin": {"DataType": "String", "StringValue": "rest"}}
    sqs.delete_message(QueueUrl=rest_url, ReceiptHandle=received[0]["ReceiptHandle"])
    assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1).get("Messages") is None  # acked over REST: gone
