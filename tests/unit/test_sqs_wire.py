"""The SQS endpoint's wire pieces alone: SigV4 checked against botocore's own signer, the query protocol's flattened
fields, XML answers, SQS's digests (gateway/sqs/signature.py, protocol.py, digests.py)."""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
from urllib.parse import urlsplit
from xml.etree import ElementTree

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from tideway_server.gateway.sqs import protocol, signature
from tideway_server.gateway.sqs.digests import md5_of_attributes, md5_of_body

SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"


def _signed(url: str, body: bytes, headers: dict, *, secret: str = SECRET, region: str = "us-east-1"):
    request = AWSRequest(method="POST", url=url, data=body, headers=headers)
    SigV4Auth(Credentials("TWAK0123456789AB", secret), "sqs", region).add_auth(request)
    prepared = request.prepare()
    parts = urlsplit(prepared.url)
    sent = {k.lower(): v for k, v in prepared.headers.items()}
    sent["host"] = parts.netloc
    return parts.path, parts.query, sent


def _verify(path, query, headers, body, **kwargs):
    return signature.verify("POST", path, query, headers, body, secret_for=lambda k: SECRET if k == "TWAK0123456789AB" else None,
                            region="us-east-1", **kwargs)


@pytest.mark.parametrize("url, body, headers", [
    ("http://10.0.0.5:8000/sqs/", b'{"QueueName": "orders"}',
     {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.CreateQueue"}),
    ("http://127.0.0.1:8000/sqs/000000000042/orders.fifo?b=x%20y&a=1", b"Action=SendMessage&MessageBody=hi+there",
     {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}),
])
def test_botocores_signatures_verify_and_any_change_is_refused(url, body, headers):
    path, query, sent = _signed(url, body, headers)
    assert _verify(path, query, sent, body).access_key_id == "TWAK0123456789AB"
    for changed in ({"body": body + b" "}, {"path": path + "x"}, {"query": query + "&c=1"},
                    {"headers": {**sent, "x-amz-target": "AmazonSQS.DeleteQueue"} if "x-amz-target" in sent else
                     {**sent, "content-type": "text/plain"}}):
        args = {"path": path, "query": query, "headers": sent, "body": body, **changed}
        with pytest.raises(signature.SignatureError) as refused:
            _verify(args["path"], args["query"], args["headers"], args["body"])
        assert refused.value.code == "SignatureDoesNotMatch"


def test_wrong_secret_unknown_key_other_region_old_signature_and_no_signature():
    body = b"{}"
    path, query, sent = _signed("http://h/sqs/", body, {"X-Amz-Target": "AmazonSQS.ListQueues"}, secret="other")
    with pytest.raises(signature.SignatureError) as refused:
        _verify(path, query, sent, body)
    assert refused.value.code == "SignatureDoesNotMatch" and refused.value.status == 403
    with pytest.raises(signature.SignatureError) as refused:
        signature.verify("POST", path, query, sent, body, secret_for=lambda k: None, region="us-east-1")
    assert refused.value.code == "InvalidClientTokenId"
    path, query, sent = _signed("http://h/sqs/", body, {}, region="eu-west-1")
    with pytest.raises(signature.SignatureError) as refused:
        _verify(path, query, sent, body)
    assert refused.value.code == "SignatureDoesNotMatch" and "region" in refused.value.message
    path, query, sent = _signed("http://h/sqs/", body, {})
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=16)
    with pytest.raises(signature.SignatureError) as refused:
        _verify(path, query, sent, body, now=later)
    assert refused.value.code == "RequestExpired"
    with pytest.raises(signature.SignatureError) as refused:
        _verify(path, query, {"host": "h"}, body)
    assert refused.value.code == "MissingAuthenticationToken"


def test_the_query_protocols_flattened_fields_become_the_json_shape():
    form = ("Action=SendMessageBatch&Version=2012-11-05&QueueUrl=http%3A%2F%2Fh%2Fsqs%2F1%2Fq"
            "&SendMessageBatchRequestEntry.1.Id=a&SendMessageBatchRequestEntry.1.MessageBody=one"
            "&SendMessageBatchRequestEntry.1.DelaySeconds=5"
            "&SendMessageBatchRequestEntry.1.MessageAttribute.1.Name=kind"
            "&SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.DataType=String"
            "&SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringValue=order"
            "&SendMessageBatchRequestEntry.2.Id=b&SendMessageBatchRequestEntry.2.MessageBody=two")
    request = protocol.parse("POST", "", {}, form.encode())
    assert request.action == "SendMessageBatch" and request.protocol == "query"
    assert request.params == {"QueueUrl": "http://h/sqs/1/q", "Entries": [
        {"Id": "a", "MessageBody": "one", "DelaySeconds": 5,
         "MessageAttributes": {"kind": {"DataType": "String", "StringValue": "order"}}},
        {"Id": "b", "MessageBody": "two"}]}
    created = protocol.parse("POST", "", {}, b"Action=CreateQueue&QueueName=q&Attribute.1.Name=VisibilityTimeout"
                             b"&Attribute.1.Value=20&Tag.1.Key=team&Tag.1.Value=x&Attribute.2.Name=DelaySeconds&Attribute.2.Value=3")
    assert created.params == {"QueueName": "q", "Attributes": {"VisibilityTimeout": "20", "DelaySeconds": "3"},
                              "tags": {"team": "x"}}
    received = protocol.parse("GET", "Action=ReceiveMessage&AttributeName.1=All&MaxNumberOfMessages=10", {}, b"")
    assert received.params == {"AttributeNames": ["All"], "MaxNumberOfMessages": 10}
    for bad in (b"Action=ReceiveMessage&MaxNumberOfMessages=ten", b"Action=X&Attribute.x.Name=a", b"MessageBody=x"):
        with pytest.raises(protocol.SqsError):
            protocol.parse("POST", "", {}, bad)


def test_query_answers_are_xml_with_flattened_lists_and_maps():
    request = protocol.SqsRequest("ReceiveMessage", {}, "query")
    result = {"Messages": [{"MessageId": "m1", "Body": "a <b> & c", "Attributes": {"SentTimestamp": "1"},
                            "MessageAttributes": {"kind": {"DataType": "String", "StringValue": "x"}}}]}
    status, headers, body = protocol.success(request, result, "rid-1")
    root = ElementTree.fromstring(body)
    ns = {"s": protocol.XML_NAMESPACE}
    assert status == 200 and headers["content-type"] == "text/xml"
    message = root.find("s:ReceiveMessageResult/s:Message", ns)
    assert message.find("s:Body", ns).text == "a <b> & c"
    assert message.find("s:Attribute/s:Name", ns).text == "SentTimestamp"
    assert message.find("s:MessageAttribute/s:Value/s:StringValue", ns).text == "x"
    assert root.find("s:ResponseMetadata/s:RequestId", ns).text == "rid-1"
    # A long poll that found nothing still has its (empty) result element, which SDKs look for; an action
    # without a result has none.
    _, _, body = protocol.success(request, {}, "rid-4")
    assert ElementTree.fromstring(body).find("s:ReceiveMessageResult", ns) is not None
    _, _, body = protocol.success(protocol.SqsRequest("DeleteMessage", {}, "query"), {}, "rid-5")
    assert [child.tag.split("}")[1] for child in ElementTree.fromstring(body)] == ["ResponseMetadata"]
    status, headers, body = protocol.failure("query", protocol.SqsError("QueueDoesNotExist", "gone"), "rid-2")
    error = ElementTree.fromstring(body).find("s:Error", ns)
    assert status == 400 and error.find("s:Code", ns).text == "AWS.SimpleQueueService.NonExistentQueue"
    status, headers, body = protocol.failure("json", protocol.SqsError("QueueDoesNotExist", "gone"), "rid-3")
    assert headers["x-amzn-query-error"] == "AWS.SimpleQueueService.NonExistentQueue;Sender"
    assert json.loads(body)["__type"].endswith("#QueueDoesNotExist")


def test_digests_are_sqss():
    assert md5_of_body("hello") == hashlib.md5(b"hello").hexdigest()
    assert md5_of_attributes({}) is None
    # Computed by hand from the published rule: sorted names, 4-byte lengths, transport byte 1 (String) / 2 (Binary).
    expected = hashlib.md5(
        b"\x00\x00\x00\x01a" + b"\x00\x00\x00\x06Binary" + b"\x02" + b"\x00\x00\x00\x02\x01\x02"
        + b"\x00\x00\x00\x01b" + b"\x00\x00\x00\x06String" + b"\x01" + b"\x00\x00\x00\x01x").hexdigest()
    assert md5_of_attributes({"b": {"DataType": "String", "StringValue": "x"},
                              "a": {"DataType": "Binary", "BinaryValue": base64.b64encode(b"\x01\x02").decode()}}) == expected
