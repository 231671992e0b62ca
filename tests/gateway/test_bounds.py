"""Every value a client sends is bounded: a meaningless one is a 400 in the one error shape and changes nothing.

Offsets and timestamps are bounded by the log (a commit or seek past the end
is refused, lag is never negative), numbers by what the protocol carries,
times by what can be a time (issue 15).
"""

from __future__ import annotations

from tests.harness.gateway import make_queue


def _refused(answer, code: str = "invalid_request", status: int | None = None) -> None:
    status = status or (416 if code == "offset_out_of_range" else 400)
    body = answer.json()
    assert (answer.status_code, body["code"]) == (status, code), answer.text[:300]
    assert body["message"] and body["error_code"]


def test_offsets_and_timestamps_are_bounded_by_the_log_and_lag_is_never_negative(gateway, tenant):
    _, key = tenant
    name = make_queue(gateway, key, partitions=2, mode="stream")
    base = f"/api/v1/queues/{name}"
    with gateway.client(key) as api:
        assert api.post(f"{base}/messages", json={"messages": [{"value": "a", "partition": 1}]}).status_code == 200
        for offset in (2**63, 2**64 - 1, 2**64):
            _refused(api.post(f"{base}/groups/g/offsets", json={"offsets": [{"partition": 0, "offset": offset}]}))
        # Partition 0 is empty: its only position is 0; partition 1 holds one record.
        _refused(api.post(f"{base}/groups/g/offsets", json={"offsets": [{"partition": 0, "offset": 50}]}), "offset_out_of_range")
        _refused(api.post(f"{base}/groups/g/seek", json={"offset": 3, "partitions": [0]}), "offset_out_of_range")
        _refused(api.post(f"{base}/groups/g/offsets", json={"offsets": [{"partition": 1, "offset": 2}]}), "offset_out_of_range")
        lag = api.get(f"{base}/groups/g/offsets").json()["partitions"]
        assert [p["committed"] for p in lag] == [-1, -1]  # nothing was committed by the refused calls
        assert api.post(f"{base}/groups/g/offsets", json={"offsets": [{"partition": 1, "offset": 1}]}).status_code == 200
        assert api.post(f"{base}/groups/g/seek", json={"offset": 0, "partitions": [0]}).status_code == 200
        lag = api.get(f"{base}/groups/g/offsets").json()["partitions"]
        assert [(p["committed"], p["lag"]) for p in lag] == [(0, 0), (1, 0)]
        for timestamp in ("1e23", str(10**20), "-1"):
            _refused(api.get(f"{base}/partitions/0/messages", params={"timestamp": timestamp}))
            _refused(api.get(f"{base}/partitions/0/offsets", params={"timestamp": timestamp}))
        _refused(api.get(f"{base}/partitions/0/messages", params={"offset": str(2**63)}))
        _refused(api.post(f"{base}/groups/g/seek", json={"timestamp": 10**20}))


def test_publish_receive_and_settle_refuse_values_that_mean_nothing(gateway, tenant):
    _, key = tenant
    name = make_queue(gateway, key, partitions=1)
    base = f"/api/v1/queues/{name}"
    with gateway.client(key) as api:
        invalid_utf8 = b'{"messages": [{"value": "a\xffb"}]}'
        _refused(api.post(f"{base}/messages", content=invalid_utf8, headers={"Content-Type": "application/json"}),
                 "malformed_request")
        for deliver_at in (10**20, -(2**63), "0001-01-01T00:00:00Z", "9999-01-01T00:00:00Z"):
            _refused(api.post(f"{base}/messages", json={"messages": [{"value": "x", "deliver_at": deliver_at}]}))
        assert api.get(f"{base}/messages", params={"max_messages": 10}).json()["messages"] == []  # nothing stored

        assert api.post(f"{base}/messages", json={"messages": [{"value": "x"}]}).status_code == 200
        for timeout in (1e-300, 0, -1, 1e300):
            _refused(api.post(f"{base}/groups/g/receive", json={"visibility_timeout": timeout}))
        for receipt in ("0:99999999999999999999999:1", "-1:0:1", "0:0:0"):
            _refused(api.post(f"{base}/groups/g/ack", json={"receipts": [receipt]}))
        received = api.post(f"{base}/groups/g/receive", json={"max_messages": 1}).json()["messages"]
        assert [m["value"] for m in received] == ["x"]  # the refusals consumed nothing
        receipt = received[0]["receipt"]
        _refused(api.post(f"{base}/groups/g/extend", json={"receipts": [receipt], "seconds": 1e-300}))
        assert api.post(f"{base}/groups/g/reject", json={"receipts": [receipt]}).status_code == 200

        for selection in ([{"partition": 99999, "offset": 0}], [{"partition": 0, "offset": -1}]):
            _refused(api.post(f"{base}/dead-letters/redrive", json={"messages": selection}))
