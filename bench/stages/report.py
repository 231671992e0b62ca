"""Where a message's time goes, from the event logs of ``bench/stages/sitecustomize.py``.

    .venv/bin/python bench/stages/report.py /tmp/stages [--skip 200]

Splits the publisher's events into messages at each ``send`` (the latency phase sends one at a time,
1 ms apart) and prints, for every event that follows a send, how long after the send it came
(median, p90, p99, µs); then the critical path (send, the request's write, the broker's read, the
handler's start, the consumer's read and ``getmany``'s return) stage by stage for the median messages
and the slowest ones: which stage the tail is made of. Processes are told apart by what they log:
the broker reads requests, the publisher sends, the consumer gets.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
from collections import defaultdict
from itertools import pairwise

PATH = ["P:send", "P:write_0", "B:broker_read", "B:start_0", "C:read", "C:read_done", "C:got"]


def load(directory: str) -> list[tuple[int, str]]:
    events: list[tuple[int, str, str]] = []
    for path in glob.glob(os.path.join(directory, "*.log")):
        pid = os.path.basename(path)[:-4]
        with open(path) as lines:
            events.extend((int(at), pid, name) for at, name in (line.split() for line in lines if line.strip()))
    events.sort()
    roles: dict[str, str] = {pid: "B" for _, pid, name in events if name == "broker_read"}
    for _, pid, name in events:
        if pid not in roles and name in ("send", "got"):
            roles[pid] = "P" if name == "send" else "C"
    return [(at, f"{roles[pid]}:{name}") for at, pid, name in events if pid in roles]


def messages(events: list[tuple[int, str]]) -> list[dict[str, int]]:
    """Per message: each event's first time (ns) after the publisher's send, until the next send."""
    out: list[dict[str, int]] = []
    for at, name in events:
        if name == "P:send":
            out.append({name: at})
        elif out and name not in out[-1]:
            out[-1][name] = at
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory")
    parser.add_argument("--skip", type=int, default=200, help="messages to leave out at the start (warm-up)")
    args = parser.parse_args()
    found = messages(load(args.directory))[args.skip:]
    if not found:
        raise SystemExit(f"no messages in {args.directory}: was TIDEWAY_STAGE_LOG set for the bench?")
    after: dict[str, list[float]] = defaultdict(list)
    for message in found:
        start = message["P:send"]
        for name, at in message.items():
            after[name].append((at - start) / 1000)
    print(f"{len(found)} messages; µs after the send")
    print(f"{'event':<18} {'count':>6} {'p50':>8} {'p90':>8} {'p99':>8}")
    for name, values in sorted(after.items(), key=lambda item: statistics.median(item[1])):
        values.sort()
        if len(values) < len(found) // 10:
            continue  # another process's occasional work (metering, metadata), not the message's way
        print(f"{name:<18} {len(values):>6} {statistics.median(values):>8.1f} {values[int(len(values) * 0.9)]:>8.1f} "
              f"{values[int(len(values) * 0.99)]:>8.1f}")
    complete = [m for m in found if all(stage in m for stage in PATH) and all(m[a] <= m[b] for a, b in pairwise(PATH))]
    complete.sort(key=lambda m: m[PATH[-1]] - m[PATH[0]])
    count = len(complete)
    if count < 50:
        return
    print(f"\nthe critical path, stage by stage (µs, means; {count} messages with every stage in order)")
    print(f"{'messages':<14}" + "".join(f"{stage.split(':')[1]:>12}" for stage in PATH[1:]) + f"{'total':>10}")
    for label, share in (("p40-p60", complete[int(count * 0.4):int(count * 0.6)]),
                         ("p90-p98", complete[int(count * 0.9):int(count * 0.98)]), ("slowest 2%", complete[int(count * 0.98):])):
        stages = [statistics.mean((m[b] - m[a]) / 1000 for m in share) for a, b in pairwise(PATH)]
        print(f"{label:<14}" + "".join(f"{value:>12.1f}" for value in stages) + f"{sum(stages):>10.1f}")


if __name__ == "__main__":
    main()
