"""Creating a queue costs the same at the thousandth as at the first (a whole deployment; issue 20).

Each create used to push the whole cluster's state to every broker (and read
every topic's metadata), so creating N queues cost O(N^2) (the last hundred of
a thousand took 8.75x the first). The controller now pushes what changed; the
periodic push still carries everything. Creates are measured against a request
made right after each (reading one queue), so that the machine's own changes of
speed during the run do not count.
"""

from __future__ import annotations

import re
import statistics
import time

import pytest

from tests.harness.control_plane import running_control_plane

pytestmark = pytest.mark.timeout(900)

QUEUES = 1_000


def test_the_last_hundred_of_a_thousand_queue_creates_take_no_longer_than_the_first_hundred(tmp_path):
    with running_control_plane(tmp_path, f"sqlite://{tmp_path}/control.sqlite3") as plane:
        _slug, key = plane.create_tenant(plan="enterprise")
        took, reference = [], []
        with plane.client(key) as api:
            for i in range(QUEUES):
                started = time.perf_counter()
                answer = api.post("/api/v1/queues/", json={"name": f"many-{i:04d}"})
                took.append(time.perf_counter() - started)
                assert answer.status_code == 201, answer.text
                # A request whose cost does not grow with the number of queues, right after: it
                # slows down with the machine (whose speed moves by 2x within minutes), not with N.
                started = time.perf_counter()
                assert api.get("/api/v1/queues/many-0000").status_code == 200
                reference.append(time.perf_counter() - started)
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
        # Each hundred's median create in units of the same hundred's median reference request.
        first = statistics.median(took[:100]) / statistics.median(reference[:100])
        last = statistics.median(took[-100:]) / statistics.median(reference[-100:])
        assert last <= 1.5 * first, (
            f"median create {statistics.median(took[:100]) * 1000:.0f} ms for the first 100, "
            f"{statistics.median(took[-100:]) * 1000:.0f} ms for the last 100 (reference request "
            f"{statistics.median(reference[:100]) * 1000:.1f} and {statistics.median(reference[-100:]) * 1000:.1f} ms)")
