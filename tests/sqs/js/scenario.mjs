// The SQS endpoint driven by the AWS JavaScript SDK v3, which checks the MD5 digest of every body it sends and
// receives (its md5 middleware is on by default): node scenario.mjs ENDPOINT REGION ACCESS_KEY_ID SECRET.
// Prints what it saw as JSON; tests/sqs/test_javascript_sdk.py checks it. The steps of tests/sqs/scenario.py:
// 1,000 messages in batches with attributes and delays through four long-polling workers, visibility changes,
// dead letters past maxReceiveCount and a move task back, FIFO order and deduplication, SQS's errors.
import {
  SQSClient, CreateQueueCommand, SendMessageCommand, SendMessageBatchCommand, ReceiveMessageCommand,
  DeleteMessageBatchCommand, ChangeMessageVisibilityCommand, GetQueueAttributesCommand, GetQueueUrlCommand,
  DeleteQueueCommand, DeleteMessageCommand, StartMessageMoveTaskCommand, ListMessageMoveTasksCommand,
  ListDeadLetterSourceQueuesCommand,
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

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const counts = async (url) => {
  const a = (await sqs.send(new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ["All"] }))).Attributes;
  return [Number(a.ApproximateNumberOfMessages), Number(a.ApproximateNumberOfMessagesNotVisible),
    Number(a.ApproximateNumberOfMessagesDelayed)];
};
const refusal = async (command) => {
  try {
    await sqs.send(command);
    return null;
  } catch (error) {
    return { name: error.name, status: error.$metadata.httpStatusCode };
  }
};

// 1,000 messages in batches of 10 (every hundredth delayed 2 s), four workers receiving with long polls and
// deleting in batches; every body and attribute digest is checked by the SDK itself.
{
  const { QueueUrl: url } = await sqs.send(new CreateQueueCommand({ QueueName: "js-thousand", Attributes: { VisibilityTimeout: "20" } }));
  const sent = new Set();
  for (let start = 0; start < 1000; start += 10) {
    const answer = await sqs.send(new SendMessageBatchCommand({ QueueUrl: url, Entries: Array.from({ length: 10 }, (_, k) => ({
      Id: `m${start + k}`, MessageBody: `thousand ${start + k}`, MessageAttributes: attributes(start + k),
      ...((start + k) % 100 === 0 ? { DelaySeconds: 2 } : {}) })) }));
    if ((answer.Failed || []).length) throw new Error(JSON.stringify(answer.Failed));
    for (const r of answer.Successful) sent.add(r.MessageId);
  }
  const received = new Map();
  const worker = async () => {
    for (let empty = 0; empty < 3;) {
      const answer = await sqs.send(new ReceiveMessageCommand({ QueueUrl: url, MaxNumberOfMessages: 10, WaitTimeSeconds: 2,
        MessageAttributeNames: ["All"] }));
      const messages = answer.Messages || [];
      empty = messages.length ? 0 : empty + 1;
      for (const m of messages) received.set(m.MessageId, m.Body);
      if (messages.length) {
        const deleted = await sqs.send(new DeleteMessageBatchCommand({ QueueUrl: url,
          Entries: messages.map((m, n) => ({ Id: `d${n}`, ReceiptHandle: m.ReceiptHandle })) }));
        if ((deleted.Failed || []).length) throw new Error(JSON.stringify(deleted.Failed));
      }
    }
  };
  await Promise.all([worker(), worker(), worker(), worker()]);
  seen.thousand = { sent: sent.size, received: received.size, same: [...sent].every((id) => received.has(id)),
    counts: await counts(url) };
  await sqs.send(new DeleteQueueCommand({ QueueUrl: url }));
}

// Dead letters: received twice and never deleted, 20 messages go to the dead-letter queue; a move task brings
// them back.
{
  const { QueueUrl: dlq } = await sqs.send(new CreateQueueCommand({ QueueName: "js-dlq" }));
  const dlqArn = (await sqs.send(new GetQueueAttributesCommand({ QueueUrl: dlq, AttributeNames: ["QueueArn"] }))).Attributes.QueueArn;
  const { QueueUrl: url } = await sqs.send(new CreateQueueCommand({ QueueName: "js-jobs", Attributes: {
    VisibilityTimeout: "1", RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlqArn, maxReceiveCount: 2 }) } }));
  const sources = (await sqs.send(new ListDeadLetterSourceQueuesCommand({ QueueUrl: dlq }))).queueUrls;
  for (const start of [0, 10]) {
    await sqs.send(new SendMessageBatchCommand({ QueueUrl: url, Entries: Array.from({ length: 10 }, (_, k) => ({
      Id: `j${k}`, MessageBody: `job ${start + k}` })) }));
  }
  const receives = {};
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    const got = (await sqs.send(new ReceiveMessageCommand({ QueueUrl: url, MaxNumberOfMessages: 10, WaitTimeSeconds: 1 }))).Messages || [];
    for (const m of got) receives[m.Body] = (receives[m.Body] || 0) + 1;
    if (!got.length && Object.keys(receives).length === 20 && Object.values(receives).every((n) => n >= 2)
        && (await counts(dlq))[0] === 20) break;
  }
  const dead = await counts(dlq);
  await sqs.send(new StartMessageMoveTaskCommand({ SourceArn: dlqArn, MaxNumberOfMessagesPerSecond: 50 }));
  let status;
  for (const until = Date.now() + 60_000; Date.now() < until;) {
    [status] = (await sqs.send(new ListMessageMoveTasksCommand({ SourceArn: dlqArn }))).Results;
    if (status.Status !== "RUNNING") break;
    await sleep(500);
  }
  const back = new Set();
  for (const until = Date.now() + 30_000; back.size < 20 && Date.now() < until;) {
    for (const m of (await sqs.send(new ReceiveMessageCommand({ QueueUrl: url, MaxNumberOfMessages: 10, WaitTimeSeconds: 1 }))).Messages || []) {
      back.add(m.Body);
      await sqs.send(new DeleteMessageCommand({ QueueUrl: url, ReceiptHandle: m.ReceiptHandle }));
    }
  }
  seen.deadLetters = { sources: sources.map((u) => u.split("/").pop()), receives: Object.values(receives),
    dead, moved: status.ApproximateNumberOfMessagesMoved, status: status.Status, back: back.size,
    after: [await counts(dlq), await counts(url)] };
}

// FIFO: each group in order, a duplicate deduplication id answered as the first copy and delivered once.
{
  const { QueueUrl: url } = await sqs.send(new CreateQueueCommand({ QueueName: "js-jobs.fifo", Attributes: { FifoQueue: "true" } }));
  for (let i = 0; i < 30; i++) {
    await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: `g${i % 3}-${i}`, MessageGroupId: `g${i % 3}`,
      MessageDeduplicationId: `d${i}` }));
  }
  const first = await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: "once", MessageGroupId: "g0", MessageDeduplicationId: "only" }));
  const second = await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: "twice", MessageGroupId: "g0", MessageDeduplicationId: "only" }));
  const bodies = [];
  for (const until = Date.now() + 30_000; bodies.length < 31 && Date.now() < until;) {
    for (const m of (await sqs.send(new ReceiveMessageCommand({ QueueUrl: url, MaxNumberOfMessages: 10, WaitTimeSeconds: 1 }))).Messages || []) {
      bodies.push(m.Body);
      await sqs.send(new DeleteMessageCommand({ QueueUrl: url, ReceiptHandle: m.ReceiptHandle }));
    }
  }
  seen.fifo = { bodies, sameId: first.MessageId === second.MessageId, counts: await counts(url) };
}

// SQS's errors: bad parameters, an unknown queue, a wrong secret.
{
  const { QueueUrl: url } = await sqs.send(new CreateQueueCommand({ QueueName: "js-errors" }));
  const wrong = new SQSClient({ endpoint, region, credentials: { accessKeyId, secretAccessKey: "x".repeat(40) }, maxAttempts: 1 });
  let signature;
  try {
    await wrong.send(new GetQueueUrlCommand({ QueueName: "js-errors" }));
  } catch (error) {
    signature = { name: error.name, status: error.$metadata.httpStatusCode };
  }
  seen.errors = {
    tooMany: await refusal(new ReceiveMessageCommand({ QueueUrl: url, MaxNumberOfMessages: 11 })),
    emptyBatch: await refusal(new SendMessageBatchCommand({ QueueUrl: url, Entries: [] })),
    unknownQueue: await refusal(new SendMessageCommand({ QueueUrl: url.replace("/js-errors", "/js-nowhere"), MessageBody: "x" })),
    badHandle: await refusal(new DeleteMessageCommand({ QueueUrl: url, ReceiptHandle: "nonsense" })),
    signature,
  };
}
console.log(JSON.stringify(seen));
