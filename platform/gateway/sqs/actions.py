"""Every SQS action this endpoint serves, by name."""

from __future__ import annotations

from tideway_server.gateway.errors import GatewayError
from tideway_server.gateway.sqs import messages, moves, queues
from tideway_server.gateway.sqs.common import Context, as_sqs
from tideway_server.gateway.sqs.protocol import SqsError

ACTIONS = {
    "CreateQueue": queues.create_queue, "GetQueueUrl": queues.get_queue_url, "ListQueues": queues.list_queues,
    "GetQueueAttributes": queues.get_queue_attributes, "SetQueueAttributes": queues.set_queue_attributes,
    "DeleteQueue": queues.delete_queue, "PurgeQueue": queues.purge_queue,
    "TagQueue": queues.tag_queue, "UntagQueue": queues.untag_queue, "ListQueueTags": queues.list_queue_tags,
    "ListDeadLetterSourceQueues": queues.list_dead_letter_source_queues,
    "StartMessageMoveTask": moves.start_message_move_task, "ListMessageMoveTasks": moves.list_message_move_tasks,
    "CancelMessageMoveTask": moves.cancel_message_move_task,
    "SendMessage": messages.send_message, "SendMessageBatch": messages.send_message_batch,
    "ReceiveMessage": messages.receive_message,
    "DeleteMessage": messages.delete_message, "DeleteMessageBatch": messages.delete_message_batch,
    "ChangeMessageVisibility": messages.change_message_visibility,
    "ChangeMessageVisibilityBatch": messages.change_message_visibility_batch,
}


async def handle(ctx: Context, action: str, params: dict) -> dict:
    handler = ACTIONS.get(action)
    if handler is None:
        raise SqsError("InvalidAction", f"{action!r} is not an SQS action this endpoint serves (docs/sqs.md)")
    try:
        return await handler(ctx, params)
    except GatewayError as exc:
        raise as_sqs(exc) from None
