"""Many rounds of each nemesis (issue 45): the suite runs one round of each (tests/nemesis/test_nemeses.py); this
runs as many as asked and prints every round's figures and a summary per nemesis as one JSON object.

Each round starts a controller and three brokers on hosts of their own (network namespaces; needs root, ip,
nft and, for the clock round, libfaketime: infra/setup.sh installs them), runs an idempotent acks=all producer and
a consumer group member through the fault (tests/nemesis/rounds.py says what each does), heals, and checks: sends
failed, acknowledged records lost, stored twice, partitions out of order, divergent replicas, records the group
never got, and the longest time a partition went without an acknowledged write during the fault. Progress goes
to stderr.

    .venv/bin/python bench/nemesis.py                          # 3 rounds of each: about 15 minutes
    .venv/bin/python bench/nemesis.py --rounds 20 --nemesis isolated-leader --nemesis one-way
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bench.common import progress  # noqa: E402
from tests.harness import hosts  # noqa: E402
from tests.nemesis.cluster import start_hosted_cluster  # noqa: E402
from tests.nemesis.rounds import NEMESES, run_round  # noqa: E402


def one_round(name: str) -> tuple[dict, list[str]]:
    with tempfile.TemporaryDirectory(prefix="tideway-nemesis-") as home, hosts.Network() as network:
        cluster = start_hosted_cluster(Path(home), network, slow_links=NEMESES[name].slow_links)
        return asyncio.run(run_round(cluster, NEMESES[name]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each nemesis (default 3)")
    parser.add_argument("--nemesis", action="append", choices=sorted(NEMESES),
                        help="only this one (repeatable; default: every nemesis)")
    args = parser.parse_args()
    reason = hosts.available()
    if reason is not None:
        parser.error(reason)
    names = args.nemesis or list(NEMESES)
    rounds, summary = [], {}
    started = time.monotonic()
    for name in names:
        figures_of_name = []
        for index in range(args.rounds):
            progress(f"{name}: round {index + 1} of {args.rounds} ({NEMESES[name].what})")
            figures, problems = one_round(name)
            figures["problems"] = problems
            rounds.append(figures)
            figures_of_name.append(figures)
            if problems:
                progress(f"{name}: round {index + 1}: {problems}")
        summary[name] = {
            "what": NEMESES[name].what,
            "rounds": len(figures_of_name),
            "rounds_with_problems": sum(1 for f in figures_of_name if f["problems"]),
            "acknowledged": sum(f["acknowledged"] for f in figures_of_name),
            **{key: sum(f[key] for f in figures_of_name)
               for key in ("failed_sends", "lost", "duplicated", "divergent_replicas", "group_missing")},
            "out_of_order_rounds": sum(1 for f in figures_of_name if f["out_of_order"]),
            "longest_silence_s_max": max(f["longest_silence_s"] for f in figures_of_name),
            "silence_bound_s": NEMESES[name].silence_bound_s,
        }
    print(json.dumps({"benchmark": "nemesis", "rounds_per_nemesis": args.rounds,
                      "minutes": round((time.monotonic() - started) / 60, 1), "summary": summary, "rounds": rounds},
                     indent=2))


if __name__ == "__main__":
    main()
