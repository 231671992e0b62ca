"""One OpenAPI document describes the whole public API, its docs render from the application's own assets,
and schemathesis finds no server error in any operation (issue 15)."""

from __future__ import annotations

import re

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

DATA_OPERATIONS = {
    ("post", "/api/v1/queues/{name}/messages"), ("get", "/api/v1/queues/{name}/messages"),
    ("post", "/api/v1/queues/{name}/groups/{group}/receive"), ("post", "/api/v1/queues/{name}/groups/{group}/ack"),
    ("post", "/api/v1/queues/{name}/groups/{group}/nack"), ("post", "/api/v1/queues/{name}/groups/{group}/reject"),
    ("post", "/api/v1/queues/{name}/groups/{group}/extend"), ("get", "/api/v1/queues/{name}/partitions/{partition}/messages"),
    ("post", "/api/v1/queues/{name}/groups/{group}/offsets"), ("post", "/api/v1/queues/{name}/groups/{group}/seek"),
    ("get", "/api/v1/queues/{name}/dead-letters"), ("post", "/api/v1/queues/{name}/dead-letters/redrive"),
    ("post", "/api/v1/queues/{name}/purge"), ("post", "/api/v1/tokens"),
}


def test_one_document_covers_management_and_data_with_the_api_key_scheme(control_plane):
    with control_plane.client() as anonymous:
        schema = anonymous.get("/api/schema/", headers={"Accept": "application/vnd.oai.openapi+json"})
        assert schema.status_code == 200
        document = schema.json()
    paths = document["paths"]
    assert "/api/v1/queues/" in paths and "/api/v1/queues/{name}" in paths and "/api/v1/registry/subjects" in paths
    operations = {(method, path) for path, item in paths.items() for method in item}
    assert DATA_OPERATIONS <= operations, DATA_OPERATIONS - operations
    assert document["components"]["securitySchemes"]["apiKey"] == {
        "type": "http", "scheme": "bearer", "bearerFormat": "tw_<prefix>_<secret>",
        "description": document["components"]["securitySchemes"]["apiKey"]["description"]}
    for path, item in paths.items():
        for method, operation in item.items():
            if path in ("/api/v1/signup", "/api/v1/signup/finish", "/api/v1/invitations/accept"):
                continue  # the calls made before having any credential (the invitee's is the signed token)
            assert {"apiKey": []} in operation.get("security", []), f"{method} {path} names no API-key security"
    # Bodies are described by the structs that decode them, bounds included.
    commit = document["components"]["schemas"]["CommitOffset"]["properties"]["offset"]
    assert (commit["minimum"], commit["maximum"]) == (0, 2**63 - 1)


def test_swagger_ui_and_redoc_load_their_assets_from_the_application(control_plane):
    with control_plane.client() as anonymous:
        for page in ("/api/docs/", "/api/redoc/"):
            html = anonymous.get(page)
            assert html.status_code == 200
            assets = re.findall(r'(?:src|href)="(/static/[^"]+)"', html.text)
            assert assets, f"{page} loads no asset of its own"
            for asset in assets:
                answer = anonymous.get(asset)
                assert answer.status_code == 200 and answer.content, f"{page}: {asset} -> {answer.status_code}"


def test_schemathesis_finds_no_server_error_in_any_operation(control_plane):
    """Bounded: a few generated requests per operation, with the key of a tenant that has every scope;
    half of them aimed at a queue that exists, so the data operations get past "queue not found"."""
    from hypothesis import given

    _, key = control_plane.create_tenant(plan="team")
    with control_plane.client(key) as api:
        queue = control_plane.unique("fuzz")
        assert api.post("/api/v1/queues/", json={"name": queue, "partitions": 2}).status_code == 201
        assert api.post(f"/api/v1/queues/{queue}/messages", json={"messages": [{"value": "x"}] * 5}).status_code == 200
    schema = schemathesis.openapi.from_url(f"{control_plane.base_url}/api/schema/?format=json")
    failures: list[str] = []
    calls = 0
    operations = 0
    data_answered: set[tuple[str, str]] = set()  # data operations that got past validation to a 2xx

    def runner(operation):
        @given(case=operation.as_strategy())
        @settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None)
        def run(case):
            nonlocal calls
            calls += 1
            data = operation.path.startswith("/api/v1/queues/{name}/") or operation.path == "/api/v1/tokens"
            if data and "name" in (case.path_parameters or {}) and calls % 2:
                case.path_parameters["name"] = queue  # not for the management calls: DELETE would remove it
            if case.path_parameters and "partition" in case.path_parameters and calls % 2:
                case.path_parameters["partition"] = calls % 3
            # Long polls are real waits: keep them short so the run stays bounded.
            if isinstance(case.body, dict) and "wait_seconds" in case.body:
                case.body["wait_seconds"] = min(case.body["wait_seconds"], 1) if isinstance(case.body["wait_seconds"], (int, float)) else 0
            if case.query and "wait_seconds" in case.query:
                case.query["wait_seconds"] = 0
            response = case.call(headers={"Authorization": f"Bearer {key}"})
            if response.status_code < 300 and (operation.method.lower(), operation.path) in DATA_OPERATIONS:
                data_answered.add((operation.method.lower(), operation.path))
            if response.status_code >= 500:
                failures.append(f"{operation.method.upper()} {case.formatted_path} -> {response.status_code}: {response.text[:200]}")
            case.validate_response(response, checks=[not_a_server_error])

        return run

    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        try:
            runner(operation)()
        except AssertionError:
            pass  # recorded in failures above
    assert operations >= 60 and calls >= operations
    assert not failures, "\n".join(failures[:10])
    assert len(data_answered) >= 5, data_answered  # the fuzzing reached real queues, not only refusals
