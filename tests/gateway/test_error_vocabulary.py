"""One error vocabulary across the management API and the data gateway (docs/api.md, "Errors").

The same mistake gets the same code and error_code wherever it is made; a
body is JSON however it is labelled; messages say what was asked.
"""

from __future__ import annotations

from tests.harness.gateway import make_queue

DAY_MS = 24 * 3600 * 1000


def test_a_missing_queue_is_queue_not_found_in_both_apis(gateway, tenant):
    _, key = tenant
    with gateway.client(key) as api:
        answers = [
            api.get("/api/v1/queues/no-such-queue"),
            api.patch("/api/v1/queues/no-such-queue", json={"partitions": 3}),
            api.post("/api/v1/queues/no-such-queue/messages", json={"messages": [{"value": "x"}]}),
            api.post("/api/v1/queues/no-such-queue/groups/g/receive", json={}),
            api.get("/api/v1/queues/no-such-queue/dead-letters"),
        ]
    for answer in answers:
        assert (answer.status_code, answer.json()["code"], answer.json()["error_code"]) == (404, "queue_not_found", 404)
        assert "no-such-queue" in answer.json()["message"]


def test_invalid_requests_carry_the_same_code_and_error_code_in_both_apis(gateway, tenant):
    _, key = tenant
    name = make_queue(gateway, key, partitions=1)
    with gateway.client(key) as api:
        management = api.post("/api/v1/queues/", json={"name": gateway.unique("q"), "partitions": 0})
        data = api.post(f"/api/v1/queues/{name}/messages", json={"messages": []})
    for answer in (management, data):
        assert (answer.status_code, answer.json()["code"], answer.json()["error_code"]) == (400, "invalid_request", 400)


def test_a_json_body_sent_as_curl_d_sends_it_is_accepted_by_both_apis(gateway, tenant):
    _, key = tenant
    form = {"Content-Type": "application/x-www-form-urlencoded"}  # what `curl -d '{...}'` labels it
    name = gateway.unique("q")
    with gateway.client(key) as api:
        created = api.post("/api/v1/queues/", content=f'{{"name": "{name}", "partitions": 1}}', headers=form)
        assert created.status_code == 201, created.text
        published = api.post(f"/api/v1/queues/{name}/messages", content='{"messages": [{"value": "x"}]}', headers=form)
        assert published.status_code == 200, published.text
        not_json = api.post("/api/v1/queues/", content="name=x&partitions=1", headers=form)
        assert (not_json.status_code, not_json.json()["code"]) == (400, "malformed_request")


def test_a_quota_refusal_names_the_value_that_was_asked(gateway, tenant):
    _, key = tenant
    with gateway.client(key) as api:
        answer = api.post("/api/v1/queues/", json={"name": gateway.unique("q"), "retention_ms": 400 * DAY_MS})
        assert (answer.status_code, answer.json()["code"]) == (403, "quota_exceeded")
        assert "up to 30 days; 400 days was asked" in answer.json()["message"]  # in words (issue 43)
        assert answer.json()["details"] == {"quota": "max_retention_ms", "limit": 30 * DAY_MS,
                                            "requested": 400 * DAY_MS, "field": "retention_ms"}
        assert "-1" not in answer.json()["message"]


def test_the_dead_letter_queue_a_queue_reports_can_be_looked_up(gateway, tenant):
    _, key = tenant
    name = make_queue(gateway, key, partitions=2)
    stream = make_queue(gateway, key, partitions=1, mode="stream")
    with gateway.client(key) as api:
        reported = api.get(f"/api/v1/queues/{name}").json()["dead_letter_queue"]
        assert reported == f"{name}.dlq"
        described = api.get(f"/api/v1/queues/{reported}")
        assert described.status_code == 200, described.text
        assert described.json()["queue"] == name and described.json()["partitions"] == 2
        letters = api.get(described.json()["messages_url"])
        assert letters.status_code == 200 and letters.json()["messages"] == []
        assert api.get(f"/api/v1/queues/{stream}").json()["dead_letter_queue"] is None
        missing = api.get(f"/api/v1/queues/{stream}.dlq")
        assert (missing.status_code, missing.json()["code"]) == (404, "queue_not_found")
