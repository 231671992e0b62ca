"""Creating a queue costs the same at the thousandth as at the first (a whole deployment; issue 20).

Each create used to push the whole cluster's state to every broker (and read
every topic's metadata), so creating N queues cost O(N^2). The controller now
pushes what changed; the periodic push still carries everything.
"""

from __future__ import annotations

import re
import statistics
import time

import pytest

from tests.api.conftest import running_control_plane

pytestmark = pytest.mark.timeout(900)

QUEUES = 1_000


def test_the_last_hundred_of_a_thousand_queue_creates_take_no_longer_than_the_first_hundred(tmp_path):
    with running_control_plane(tmp_path, f"sqlite://{tmp_path}/control.sqlite3") as plane:
        _slug, key = plane.create_tenant(plan="enterprise")
        took = []
        with plane.client(key) as api:
            for i in range(QUEUES):
                started = time.perf_counter()
                answer = api.post("/api/v1/queues/", json={"name": f"many-{i:04d}"})
                took.append(time.perf_counter() - started)
                assert answer.status_code == 201, answer.text
            # Every one of them is listed, by name, a page at a time.
            names, url = [], "/api/v1/queues/?limit=1000"
            while url:
                page = api.get(url)
                names += [q["name"] for q in page.json()]
                link = page.headers.get("Link")
                url = re.fullmatch(r'<([^>]+)>; rel="next"', link).group(1) if link else None
            assert names == [f"many-{i:04d}" for i in range(QUEUES)]
            # And the brokers know the last one: it takes messages.
            assert api.post(f"/api/v1/queues/many-{QUEUES - 1:04d}/messages", json={"messages": [{"value": "x"}]}).status_code == 200
        first, last = statistics.median(took[:100]), statistics.median(took[-100:])
        assert last <= 1.5 * first, f"median create {first * 1000:.0f} ms for the first 100, {last * 1000:.0f} ms for the last 100"
