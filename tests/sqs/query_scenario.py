"""A scenario in SQS's query protocol, run by Debian's python3-boto3 1.26 (botocore 1.29 sends the query protocol):
``/usr/bin/python3 tests/sqs/query_scenario.py ENDPOINT REGION ACCESS_KEY_ID SECRET``. Prints what it saw as JSON
(tests/sqs/test_query_protocol.py checks it). Not imported by the suite: it runs outside the virtualenv."""

import json
import sys

import boto3
import botocore
from botocore.exceptions import ClientError


def main() -> None:
    endpoint, region, access_key, secret = sys.argv[1:5]
    sqs = boto3.client("sqs", endpoint_url=endpoint, region_name=region, aws_access_key_id=access_key,
                       aws_secret_access_key=secret)
    seen = {"botocore": botocore.__version__, "protocol": sqs.meta.service_model.protocol}
    url = sqs.create_queue(QueueName="query-orders", Attributes={"VisibilityTimeout": "20"},
                           tags={"team": "old-sdk"})["QueueUrl"]
    seen["url"] = url
    seen["listed"] = sqs.list_queues(QueueNamePrefix="query-")["QueueUrls"]
    entries = [{"Id": f"m{i}", "MessageBody": f"query {i} <&>", "MessageAttributes": {
        "kind": {"DataType": "String", "StringValue": "order"},
        "amount": {"DataType": "Number", "StringValue": str(i)},
        "blob": {"DataType": "Binary", "BinaryValue": bytes([i, 0, 255])}}} for i in range(10)]
    sent = sqs.send_message_batch(QueueUrl=url, Entries=entries)
    seen["sent"] = sorted(r["Id"] for r in sent["Successful"])
    seen["sent_md5"] = sorted(r["MD5OfMessageBody"] for r in sent["Successful"])
    received = []
    for _ in range(10):
        answer = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                                     MessageAttributeNames=["All"], AttributeNames=["All"])
        for message in answer.get("Messages", []):
            attributes = message["MessageAttributes"]
            received.append({"body": message["Body"], "md5": message["MD5OfBody"],
                             "kind": attributes["kind"]["StringValue"], "amount": attributes["amount"]["StringValue"],
                             "blob": list(attributes["blob"]["BinaryValue"]),
                             "receives": message["Attributes"]["ApproximateReceiveCount"]})
            sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": "d", "ReceiptHandle": message["ReceiptHandle"]}])
        if len(received) >= 10:
            break
    seen["received"] = sorted(received, key=lambda r: r["body"])
    seen["attributes"] = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    seen["tags"] = sqs.list_queue_tags(QueueUrl=url)["Tags"]
    errors = {}
    for name, call in {
        "unknown_queue": lambda: sqs.get_queue_url(QueueName="query-nowhere"),
        "bad_max": lambda: sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=11),
        "empty_batch": lambda: sqs.delete_message_batch(QueueUrl=url, Entries=[]),
        "bad_attribute": lambda: sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Colour"]),
    }.items():
        try:
            call()
            errors[name] = None
        except ClientError as exc:
            errors[name] = [exc.response["Error"]["Code"], exc.response["ResponseMetadata"]["HTTPStatusCode"]]
    seen["errors"] = errors
    sqs.delete_queue(QueueUrl=url)
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
