"""kcat (Debian's, on librdkafka 2.0) against the Kafka listeners: it lists only the tenant's own queues, and what it
produces with snappy it reads back, partition by partition."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.harness.gateway import make_queue

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is installed by infra/setup.sh")]


def _kcat(bootstrap: str, key: str, *args: str, input_text: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["kcat", "-b", bootstrap, "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=PLAIN",
                           "-X", "sasl.username=tideway", "-X", f"sasl.password={key}", *args],
                          input=input_text, capture_output=True, text=True, timeout=60)


def test_kcat_lists_its_own_queues_and_round_trips_with_snappy(plane, tenant_a, tenant_b):
    _slug, key = tenant_a
    name = make_queue(plane, key, partitions=2, mode="stream")
    theirs = make_queue(plane, tenant_b[1], partitions=1, mode="stream")
    bootstrap = plane.deployment.kafka_bootstrap

    listed = _kcat(bootstrap, key, "-L", "-J")
    assert listed.returncode == 0, listed.stderr
    import json

    topics = {t["topic"] for t in json.loads(listed.stdout)["topics"]}
    assert name in topics and theirs not in topics
    assert not any(t.startswith("__") for t in topics)

    lines = [f"line {i}" for i in range(500)]
    produced = _kcat(bootstrap, key, "-P", "-t", name, "-z", "snappy", "-K", ":", input_text="".join(
        f"k{i % 5}:{line}\n" for i, line in enumerate(lines)))
    assert produced.returncode == 0, produced.stderr
    consumed = _kcat(bootstrap, key, "-C", "-t", name, "-o", "beginning", "-e", "-f", "%k=%s\n")
    assert consumed.returncode == 0, consumed.stderr
    got = consumed.stdout.splitlines()
    assert sorted(got) == sorted(f"k{i % 5}={line}" for i, line in enumerate(lines))


def test_kcat_consumes_in_a_group_and_the_group_commits(plane, tenant_a):
    _slug, key = tenant_a
    name = make_queue(plane, key, partitions=3, mode="stream")
    bootstrap = plane.deployment.kafka_bootstrap
    lines = [f"row {i}" for i in range(300)]
    assert _kcat(bootstrap, key, "-P", "-t", name, input_text="".join(f"{line}\n" for line in lines)).returncode == 0
    # -G: a balanced consumer in group "kcat-readers"; -e: leave once every partition is read to its end.
    consumed = _kcat(bootstrap, key, "-G", "kcat-readers", "-o", "beginning", "-e", "-f", "%s\n",
                     "-X", "enable.auto.commit=true", "-X", "auto.commit.interval.ms=100", name)
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.splitlines()) == sorted(lines)
    with plane.client(key) as api:
        offsets = api.get(f"/api/v1/queues/{name}/groups/kcat-readers/offsets").json()["partitions"]
    assert sum(max(row["committed"], 0) for row in offsets) == len(lines)  # the group's commits, read over REST
