"""The stream model over REST: read by partition and offset, commit, seek (offset, time, earliest, latest), replay,
and group membership (the coordinator assigns partitions to REST members)."""

from __future__ import annotations

import time

from tests.harness.gateway import make_queue


def test_read_commit_seek_and_replay(gateway, tenant):
    _, key = tenant
    name = make_queue(gateway, key, partitions=2, mode="stream")
    with gateway.client(key) as api:
        first = [{"value": f"e{i}", "partition": 0} for i in range(10)]
        api.post(f"/api/v1/queues/{name}/messages", json={"messages": first})
        between = int(time.time() * 1000)
        time.sleep(0.05)
        api.post(f"/api/v1/queues/{name}/messages", json={"messages": [{"value": f"f{i}", "partition": 0} for i in range(5)]})
        page = api.get(f"/api/v1/queues/{name}/partitions/0/messages", params={"offset": 0, "max_messages": 4}).json()
        assert [m["value"] for m in page["messages"]] == ["e0", "e1", "e2", "e3"]
        assert page["next_offset"] == 4 and page["high_watermark"] == 15
        rest = api.get(f"/api/v1/queues/{name}/partitions/0/messages", params={"offset": page["next_offset"]}).json()
        assert [m["value"] for m in rest["messages"]][-1] == "f4" and rest["next_offset"] == 15
        # Commit, read back the committed offsets with lag.
        assert api.post(f"/api/v1/queues/{name}/groups/readers/offsets", json={"offsets": [{"partition": 0, "offset": 4}]}).status_code == 200
        offsets = api.get(f"/api/v1/queues/{name}/groups/readers/offsets").json()["partitions"]
        assert offsets[0] == {"partition": 0, "committed": 4, "latest": 15, "lag": 11}
        assert offsets[1]["committed"] == -1
        # Seek by time: the first offset at or after `between` is the first f.
        sought = api.post(f"/api/v1/queues/{name}/groups/readers/seek", json={"timestamp": between, "partitions": [0]}).json()
        assert sought["offsets"] == [{"partition": 0, "offset": 10}]
        at = api.get(f"/api/v1/queues/{name}/partitions/0/offsets", params={"timestamp": between}).json()
        assert at == {"partition": 0, "earliest": 0, "latest": 15, "offset": 10}
        # Replay from the earliest; seek to the latest.
        assert api.post(f"/api/v1/queues/{name}/groups/readers/seek", json={"to": "earliest"}).json()["offsets"][0]["offset"] == 0
        replay = api.get(f"/api/v1/queues/{name}/partitions/0/messages", params={"from": "earliest", "max_messages": 100}).json()
        assert [m["value"] for m in replay["messages"]] == [m["value"] for m in first] + [f"f{i}" for i in range(5)]
        assert api.post(f"/api/v1/queues/{name}/groups/readers/seek", json={"to": "latest"}).json()["offsets"][0]["offset"] == 15
        # Long polling on a partition returns when a message arrives... or after the wait, empty.
        empty = api.get(f"/api/v1/queues/{name}/partitions/1/messages", params={"from": "latest", "wait_seconds": 1}).json()
        assert empty["messages"] == []
        # Queue-model calls on a stream are refused.
        refused = api.post(f"/api/v1/queues/{name}/groups/readers/receive", json={})
        assert refused.status_code == 409 and refused.json()["code"] == "wrong_mode"


def test_rest_members_share_the_partitions_of_a_group(gateway, tenant):
    _, key = tenant
    name = make_queue(gateway, key, partitions=4, mode="stream")
    with gateway.client(key) as api:
        one = api.post(f"/api/v1/queues/{name}/groups/team/members", json={"session_timeout_ms": 10_000})
        assert one.status_code == 201, one.text
        one = one.json()
        deadline = time.monotonic() + 15
        while sorted(one["assignment"]) != [0, 1, 2, 3] and time.monotonic() < deadline:
            time.sleep(0.3)
            one = api.post(f"/api/v1/queues/{name}/groups/team/members/{one['member_id']}",
                           json={"member_epoch": one["member_epoch"], "owned": one["assignment"]}).json()
        assert sorted(one["assignment"]) == [0, 1, 2, 3]
        two = api.post(f"/api/v1/queues/{name}/groups/team/members", json={"session_timeout_ms": 10_000}).json()
        # Heartbeat both until the coordinator has moved partitions to the second member (revoke, then assign).
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            one = api.post(f"/api/v1/queues/{name}/groups/team/members/{one['member_id']}",
                           json={"member_epoch": one["member_epoch"], "owned": one["assignment"]}).json()
            two = api.post(f"/api/v1/queues/{name}/groups/team/members/{two['member_id']}",
                           json={"member_epoch": two["member_epoch"], "owned": two["assignment"]}).json()
            if one["assignment"] and two["assignment"] and len(one["assignment"]) + len(two["assignment"]) == 4:
                break
            time.sleep(0.3)
        assert sorted(one["assignment"] + two["assignment"]) == [0, 1, 2, 3]
        assert not set(one["assignment"]) & set(two["assignment"])
        assert api.delete(f"/api/v1/queues/{name}/groups/team/members/{two['member_id']}").status_code == 200


def test_unkeyed_single_message_publishes_spread_over_every_partition(gateway, tenant):
    """Issue 15: every unkeyed REST publish of one message went to partition 0 (the sticky partition never moved)."""
    _, key = tenant
    name = make_queue(gateway, key, partitions=3, mode="stream")
    with gateway.client(key) as api:
        placed = [api.post(f"/api/v1/queues/{name}/messages", json={"messages": [{"value": f"m{i}"}]}).json()["messages"][0]
                  for i in range(30)]
    counts = [sum(1 for p in placed if p["partition"] == partition) for partition in range(3)]
    assert all(count >= 5 for count in counts), counts


def test_publishing_to_a_queue_deleted_a_moment_ago_is_404_at_once(gateway, tenant):
    """Issue 15: it hung 15 s, then answered 503 LEADER_NOT_AVAILABLE with Retry-After, for a queue that is gone."""
    _, key = tenant
    name = make_queue(gateway, key, partitions=2, mode="stream")
    with gateway.client(key) as api:
        assert api.post(f"/api/v1/queues/{name}/messages", json={"messages": [{"value": "before"}]}).status_code == 200
        assert api.delete(f"/api/v1/queues/{name}").status_code in (200, 204)
        for attempt in range(3):  # the first may still find the queue in the gateway's 3 s cache
            answer = api.post(f"/api/v1/queues/{name}/messages", json={"messages": [{"value": f"after {attempt}"}]})
            assert answer.status_code == 404, answer.text  # not a 503 after the delivery timeout
            assert answer.json()["code"] == "queue_not_found" and "Retry-After" not in answer.headers
