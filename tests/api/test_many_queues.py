"""Many queues of one tenant in a whole deployment (issue 20): each is created, listed a page at a time, and
known to the brokers.

Each create used to push the whole cluster's state to every broker, so creating N queues cost O(N^2); the
controller now pushes what changed. How the create time holds up to a thousand queues is measured in
``bench/scale.py --curves queues`` (``last_100_over_first_100``), not here: the suite asserts behaviour, not
wall-clock figures.
"""

from __future__ import annotations

import re

import pytest

from tests.harness.control_plane import running_control_plane

pytestmark = pytest.mark.timeout(900)

QUEUES = 250
PAGE = 100


def test_a_tenant_creates_hundreds_of_queues_lists_them_by_page_and_publishes_to_the_last(tmp_path):
    with running_control_plane(tmp_path, f"sqlite://{tmp_path}/control.sqlite3") as plane:
        _slug, key = plane.create_tenant(plan="enterprise")
        with plane.client(key) as api:
            for i in range(QUEUES):
                answer = api.post("/api/v1/queues/", json={"name": f"many-{i:04d}"})
                assert answer.status_code == 201, answer.text
            # Every one of them is listed, by name, a page at a time.
            names, pages, url = [], 0, f"/api/v1/queues/?limit={PAGE}"
            while url:
                page = api.get(url)
                pages += 1
                names += [q["name"] for q in page.json()]
                link = page.headers.get("Link")
                url = re.fullmatch(r'<([^>]+)>; rel="next"', link).group(1) if link else None
            assert names == [f"many-{i:04d}" for i in range(QUEUES)] and pages == 3
            # And the brokers know the first and the last one: they take messages.
            for name in ("many-0000", f"many-{QUEUES - 1:04d}"):
                assert api.post(f"/api/v1/queues/{name}/messages", json={"messages": [{"value": "x"}]}).status_code == 200
