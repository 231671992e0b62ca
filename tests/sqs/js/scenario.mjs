// The SQS endpoint driven by the AWS JavaScript SDK v3, which checks the MD5 digest of every body it sends and
// receives (its md5 middleware is on by default): node scenario.mjs ENDPOINT REGION ACCESS_KEY_ID SECRET.
// Prints what it saw as JSON; tests/sqs/test_javascript_sdk.py checks it.
import {
  SQSClient, CreateQueueCommand, SendMessageCommand, SendMessageBatchCommand, ReceiveMessageCommand,
  DeleteMessageBatchCommand, ChangeMessageVisibilityCommand, GetQueueAttributesCommand, GetQueueUrlCommand,
  DeleteQueueCommand,
} from "@aws-sdk/client-sqs";

const [endpoint, region, accessKeyId, secretAccessKey] = process.argv.slice(2);
const sqs = new SQSClient({ endpoint, region, credentials: { accessKeyId, secretAccessKey }, maxAttempts: 2 });
const seen = {};

const attributes = (i) => ({
  kind: { DataType: "String", StringValue: `order-${i} ünïcode` },
  amount: { DataType: "Number", StringValue: String(i * 1.5) },
  blob: { DataType: "Binary", BinaryValue: new Uint8Array([i, 0, 255]) },
  tagged: { DataType: "String.custom", StringValue: "x" },
});

const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: "js-orders", Attributes: { VisibilityTimeout: "30" } }));
seen.url = QueueUrl;
const single = await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: "single ✓", MessageAttributes: attributes(99) }));
seen.single = { id: single.MessageId, md5: single.MD5OfMessageBody, attributesMd5: single.MD5OfMessageAttributes };
const batch = await sqs.send(new SendMessageBatchCommand({
  QueueUrl, Entries: Array.from({ length: 10 }, (_, i) => ({ Id: `m${i}`, MessageBody: `js ${i}`, MessageAttributes: attributes(i) })),
}));
seen.batch = { successful: batch.Successful.length, failed: (batch.Failed || []).length };

const received = [];
for (let round = 0; round < 10 && received.length < 11; round++) {
  const answer = await sqs.send(new ReceiveMessageCommand({
    QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 2, MessageAttributeNames: ["All"], MessageSystemAttributeNames: ["All"],
  }));
  const messages = answer.Messages || [];
  const firstOfRound = received.length;
  for (const m of messages) {
    received.push({ body: m.Body, kind: m.MessageAttributes.kind.StringValue, amount: m.MessageAttributes.amount.StringValue,
      blob: Array.from(m.MessageAttributes.blob.BinaryValue), type: m.MessageAttributes.tagged.DataType,
      receives: m.Attributes.ApproximateReceiveCount });
  }
  if (messages.length) {
    if (round === 0) {
      // One message back to the queue at once: it is received again.
      await sqs.send(new ChangeMessageVisibilityCommand({ QueueUrl, ReceiptHandle: messages[0].ReceiptHandle, VisibilityTimeout: 0 }));
      received.splice(firstOfRound, 1);
      messages.shift();
    }
    if (messages.length) {
      const deleted = await sqs.send(new DeleteMessageBatchCommand({
        QueueUrl, Entries: messages.map((m, n) => ({ Id: `d${n}`, ReceiptHandle: m.ReceiptHandle })) }));
      if ((deleted.Failed || []).length) throw new Error(JSON.stringify(deleted.Failed));
    }
  }
}
seen.received = received.sort((a, b) => a.body.localeCompare(b.body));
seen.attributes = (await sqs.send(new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ["All"] }))).Attributes;
try {
  await sqs.send(new GetQueueUrlCommand({ QueueName: "js-nowhere" }));
  seen.unknownQueue = null;
} catch (error) {
  seen.unknownQueue = { name: error.name, code: error.Code ?? error.code ?? null, status: error.$metadata.httpStatusCode };
}
await sqs.send(new DeleteQueueCommand({ QueueUrl }));
console.log(JSON.stringify(seen));
