"""Search jobs of the console's message browser (webui.searches): progress, ownership, limits.

``browse.find`` is replaced by a stand-in that scans in steps, so the job's bookkeeping is what is tested;
the real search runs against brokers in tests/browser/test_console.py.
"""

import asyncio

from tideway_server.gateway.operations import browse
from tideway_server.webui import searches


async def _slow_find(caller, queue, search, progress=None):
    for scanned in (5_000, 10_000, 15_000):
        await asyncio.sleep(0.05)
        progress(scanned)
    return browse.Found(messages=[{"offset": 1}], scanned=15_000)


class _Queue:
    name = "orders"


def test_a_job_reports_progress_then_its_results_to_its_owner_only(monkeypatch):
    monkeypatch.setattr(browse, "find", _slow_find)
    searches._jobs.clear()

    async def run():
        job_id = await searches.start(None, _Queue(), browse.Search(key="x"), owner=(1, 10))
        job = await searches.wait(job_id, 0.08)
        assert not job.done.is_set() and job.scanned == 5_000  # under way: how far it got
        assert searches.owned(job_id, (2, 10), "orders") is None  # another member
        assert searches.owned(job_id, (1, 11), "orders") is None  # the same user in another tenant
        assert searches.owned(job_id, (1, 10), "payments") is None  # asked through another queue's page
        job = await searches.wait(job_id, 5)
        assert job.done.is_set() and job.error is None and job.found.scanned == 15_000
        assert searches.owned(job_id, (1, 10), "orders") is job

    asyncio.run(run())


def test_a_member_runs_at_most_two_searches_at_once(monkeypatch):
    monkeypatch.setattr(browse, "find", _slow_find)
    searches._jobs.clear()

    async def run():
        first = await searches.start(None, _Queue(), browse.Search(key="a"), owner=(1, 10))
        second = await searches.start(None, _Queue(), browse.Search(key="b"), owner=(1, 10))
        third = await searches.start(None, _Queue(), browse.Search(key="c"), owner=(1, 10))
        other = await searches.start(None, _Queue(), browse.Search(key="d"), owner=(2, 10))
        assert first and second and third is None and other  # the third runs in its request instead
        for job_id in (first, second, other):
            await searches.wait(job_id, 5)

    asyncio.run(run())


def test_a_failed_search_keeps_its_error_for_the_page(monkeypatch):
    async def broken(caller, queue, search, progress=None):
        raise OSError("connection refused")

    monkeypatch.setattr(browse, "find", broken)
    searches._jobs.clear()

    async def run():
        job = await searches.wait(await searches.start(None, _Queue(), browse.Search(key="x"), owner=(1, 10)), 5)
        assert isinstance(job.error, OSError) and job.found is None

    asyncio.run(run())
