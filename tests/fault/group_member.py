"""A stream-group member process for the churn test: logs what it owns, reads and commits.

    python -m tests.fault.group_member BOOTSTRAP GROUP TOPIC LOGFILE

Every line of LOGFILE is JSON with "t" (time.monotonic(), shared by every
process on the machine). Stops cleanly (commit, leave) on SIGTERM.
"""

import asyncio
import json
import signal
import sys
import time

from tideway.native.group import GroupConsumer


async def main(bootstrap: str, group: str, topic: str, path: str) -> None:
    out = open(path, "a", buffering=1)

    def note(event: str, **fields) -> None:
        out.write(json.dumps({"t": time.monotonic(), "event": event, **fields}) + "\n")

    def tps(items):
        return [p for _t, p in items]

    member = GroupConsumer(
        bootstrap, group, [topic], auto_offset_reset="earliest", enable_auto_commit=True, session_timeout_ms=4000,
        on_assigned=lambda items: note("assigned", partitions=tps(items)),
        on_revoked=lambda items: note("revoked", partitions=tps(items)),
        on_lost=lambda items: note("lost", partitions=tps(items)),
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await member.start()
    note("started", member=member.member_id)
    while not stop.is_set():
        batch = await member.getmany(200, max_records=50)
        for (_t, partition), records in batch.items():
            note("records", partition=partition, offsets=[r.offset for r in records])
        if batch:
            positions = {tp: member.position(tp) for tp in batch if tp in member.assignment()}
            await member.commit(offsets=positions)
            for (_t, partition), offset in positions.items():
                note("commit", partition=partition, offset=offset)
    await member.stop()
    note("stopped")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
