"""Fixtures of the SQS endpoint's tests: a whole deployment, tenants with AWS credentials, boto3 clients."""

from __future__ import annotations

import pytest

from tests.harness.control_plane import running_control_plane

REGION = "us-east-1"


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    home = tmp_path_factory.mktemp("sqs")
    with running_control_plane(home, f"sqlite://{home}/control.sqlite3") as running:
        yield running


def aws_credentials(plane, key: str) -> dict:
    """The key's AWS credentials, issued over the API as a tenant would."""
    prefix = key.split("_")[1]
    with plane.client(key) as api:
        answer = api.post(f"/api/v1/keys/{prefix}/aws-credentials")
        assert answer.status_code == 201, answer.text
        return answer.json()


def boto3_client(plane, credentials: dict, **config):
    import boto3
    from botocore.config import Config

    return boto3.client("sqs", endpoint_url=plane.base_url + "/sqs", region_name=credentials["region"],
                        aws_access_key_id=credentials["access_key_id"],
                        aws_secret_access_key=credentials["secret_access_key"],
                        config=Config(**{"retries": {"max_attempts": 2, "mode": "standard"}, **config}))


@pytest.fixture(scope="module")
def tenant(plane):
    """(tenant slug, API key, AWS credentials) of a team-plan tenant."""
    slug, key = plane.create_tenant(plan="team")
    return slug, key, aws_credentials(plane, key)


@pytest.fixture(scope="module")
def sqs(plane, tenant):
    return boto3_client(plane, tenant[2])
