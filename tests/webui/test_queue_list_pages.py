"""GET /api/v1/queues/ in pages: by name, ``limit`` a page, a Link header to the next one (pytest-django, no broker)."""

from __future__ import annotations

import re

import pytest

from tests.harness.console import make_queue, signup

pytestmark = pytest.mark.django_db


def _key(tenant, **kwargs) -> str:
    from tideway_server.tenants.actions import do_create_api_key

    return do_create_api_key(tenant, name="lister", scopes=["manage"], acting="test", **kwargs)[1]


def _all_pages(client, auth: dict, url: str) -> tuple[list[str], int]:
    names, pages = [], 0
    while url:
        answer = client.get(url, **auth)
        assert answer.status_code == 200, answer.content
        names += [q["name"] for q in answer.json()]
        pages += 1
        link = answer.headers.get("Link")
        url = re.fullmatch(r'<([^>]+)>; rel="next"', link).group(1) if link else None
    return names, pages


def test_queues_come_by_name_in_pages_and_a_key_sees_only_the_names_it_may_touch(client, cluster):
    _user, tenant = signup("paula")
    _other, stranger = signup("quinn")
    names = [f"q-{i:03d}" for i in range(0, 250)]
    for name in reversed(names):
        make_queue(tenant, cluster, name)
    make_queue(stranger, cluster, "q-theirs")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {_key(tenant)}"}

    first = client.get("/api/v1/queues/", **auth)
    assert [q["name"] for q in first.json()] == names[:100]  # 100 a page by default, in name order
    listed, pages = _all_pages(client, auth, "/api/v1/queues/?limit=60")
    assert listed == names and pages == 5  # 60 + 60 + 60 + 60 + 10, no one twice, none of the other tenant's

    limited = {"HTTP_AUTHORIZATION": f"Bearer {_key(tenant, queue_patterns=['q-1*'])}"}
    listed, _pages = _all_pages(client, limited, "/api/v1/queues/?limit=30")
    assert listed == [n for n in names if n.startswith("q-1")]  # pages stay full though most names are skipped

    for bad in ("limit=0", "limit=1001", "limit=ten"):
        answer = client.get(f"/api/v1/queues/?{bad}", **auth)
        assert answer.status_code == 400 and answer.json()["code"] == "invalid_request", answer.content
