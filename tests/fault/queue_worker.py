"""A queue worker process for the fault test: fails 1 in 10 messages on the first try and the poison one always.

    python -m tests.fault.queue_worker BOOTSTRAP GROUP TOPIC LOGFILE

Logs "acking VALUE" before an ack and "acked VALUE COUNT" after it, so a
SIGKILL between the two is visible.
"""

import asyncio
import sys
import zlib

from tideway.native.queue import QueueConsumer


async def main(bootstrap: str, group: str, topic: str, path: str) -> None:
    out = open(path, "a", buffering=1)
    async with QueueConsumer(bootstrap, group, topic) as queue:
        while True:
            messages = await queue.receive(10, wait_ms=1000)
            for message in messages:
                value = message.value.decode()
                await asyncio.sleep(0.002)  # "work"
                if value == "poison":
                    await queue.nack([message], error="cannot process poison")
                elif zlib.crc32(message.value) % 10 == 0 and message.delivery_count == 1:
                    await queue.nack([message], error="transient failure")
                else:
                    out.write(f"acking {value}\n")
                    await queue.ack([message])
                    out.write(f"acked {value} {message.delivery_count}\n")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
