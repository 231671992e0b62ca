"""The queue, dlq, groups and `consume --group` commands, run as a user would."""

from __future__ import annotations

import json

import pytest

from tests.harness.processes import run_cli

pytestmark = pytest.mark.timeout(180)


def test_queue_receive_ack_nack_extend_and_dlq_from_the_command_line(broker):
    b = broker.bootstrap
    assert run_cli("topics", "create", "--bootstrap", b, "work", "--partitions", "1",
                   "--config", "queue.max.deliveries=1").returncode == 0
    assert run_cli("produce", "--bootstrap", b, "--topic", "work", input_bytes=b"one\ntwo\nthree\n").returncode == 0
    received = run_cli("queue", "receive", "--bootstrap", b, "--group", "cli", "--topic", "work", "--max", "3", "--wait-ms", "3000")
    assert received.returncode == 0, received.stderr
    messages = [json.loads(line) for line in received.stdout.decode().splitlines()]
    assert [m["value"] for m in messages] == ["one", "two", "three"]
    receipts = {m["value"]: m["receipt"] for m in messages}
    assert run_cli("queue", "extend", "--bootstrap", b, "--group", "cli", "--topic", "work", "--seconds", "60", receipts["one"]).returncode == 0
    assert run_cli("queue", "ack", "--bootstrap", b, "--group", "cli", "--topic", "work", receipts["one"], receipts["two"]).returncode == 0
    again = run_cli("queue", "ack", "--bootstrap", b, "--group", "cli", "--topic", "work", receipts["one"])
    assert again.returncode == 1 and b"INVALID_RECORD_STATE" in again.stderr
    nacked = run_cli("queue", "nack", "--bootstrap", b, "--group", "cli", "--topic", "work", "--error", "boom", receipts["three"])
    assert nacked.returncode == 0, nacked.stderr
    listed = b""
    for _ in range(50):  # the dead-letter write is asynchronous
        listed = run_cli("dlq", "list", "--bootstrap", b, "--topic", "work").stdout
        if listed:
            break
    (letter,) = [json.loads(line) for line in listed.decode().splitlines()]
    assert letter["value"] == "three" and letter["headers"]["tideway-dlq-last-error"] == "boom"
    redriven = run_cli("dlq", "redrive", "--bootstrap", b, "--topic", "work", "--rate", "10")
    assert redriven.returncode == 0 and b"redrove 1" in redriven.stderr
    back = run_cli("queue", "receive", "--bootstrap", b, "--group", "cli", "--topic", "work", "--wait-ms", "3000", "--ack")
    assert [json.loads(line)["value"] for line in back.stdout.decode().splitlines()] == ["three"]
    described = json.loads(run_cli("groups", "describe", "--bootstrap", b, "--group", "cli").stdout)
    assert described["type"] == "queue" and described["partitions"][0]["lag"] == 0


def test_consume_with_a_group_resumes_where_it_committed(broker):
    b = broker.bootstrap
    assert run_cli("topics", "create", "--bootstrap", b, "feed", "--partitions", "2").returncode == 0
    lines = b"".join(b"m%d\n" % i for i in range(20))
    assert run_cli("produce", "--bootstrap", b, "--topic", "feed", input_bytes=lines).returncode == 0
    first = run_cli("consume", "--bootstrap", b, "--topic", "feed", "--group", "readers", "--from", "earliest", "--max", "12")
    assert first.returncode == 0, first.stderr
    rest = run_cli("consume", "--bootstrap", b, "--topic", "feed", "--group", "readers", "--from", "earliest", "--idle-exit-ms", "1500")
    got = first.stdout.splitlines() + rest.stdout.splitlines()
    assert sorted(got) == sorted(lines.splitlines()), "every message once over the two runs"
    described = json.loads(run_cli("groups", "describe", "--bootstrap", b, "--group", "readers").stdout)
    assert described["type"] == "stream" and sum(p["lag"] for p in described["partitions"]) == 0
