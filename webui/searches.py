"""Message searches that take a while run as jobs in the server's event loop, so the page can show progress.

The browser starts a filtered search; if it has not finished within ``FIRST_WAIT_S`` the page shows how
many records it has scanned (of the budget) and asks again a moment later, until the results are there.
A job belongs to the member and tenant that started it (nobody else can read it, even with its id), is
kept for ``KEEP_S`` after it ends, and there are at most ``RUNNING_PER_MEMBER`` running per member and
``JOBS_MAX`` in all; over those, the search runs in the request as before.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from dataclasses import dataclass, field

from tideway_server.gateway.operations import browse
from tideway_server.gateway.operations.members import Caller, QueueInfo

# How long a request waits for its search before showing progress instead (TIDEWAY_CONSOLE_SEARCH_WAIT_S).
FIRST_WAIT_S = float(os.environ.get("TIDEWAY_CONSOLE_SEARCH_WAIT_S", "0.5"))
KEEP_S = 120.0
RUNNING_PER_MEMBER = 2
JOBS_MAX = 50


@dataclass
class Job:
    owner: tuple[int, int]  # (user id, tenant id)
    queue: str
    search: browse.Search
    scanned: int = 0
    found: browse.Found | None = None
    error: Exception | None = None
    ended: float | None = None  # monotonic time, once done
    done: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task | None = None


_jobs: dict[str, Job] = {}


def _forget_old() -> None:
    now = time.monotonic()
    for job_id in [j for j, job in _jobs.items() if job.ended is not None and now - job.ended > KEEP_S]:
        del _jobs[job_id]


async def start(caller: Caller, queue: QueueInfo, search: browse.Search, owner: tuple[int, int]) -> str | None:
    """Start the search; its id, or None when too many are running (the caller searches in the request)."""
    _forget_old()
    running = [job for job in _jobs.values() if job.ended is None]
    if len(_jobs) >= JOBS_MAX or sum(job.owner == owner for job in running) >= RUNNING_PER_MEMBER:
        return None
    job_id = secrets.token_hex(16)
    job = _jobs[job_id] = Job(owner=owner, queue=queue.name, search=search)

    def progress(scanned: int) -> None:
        job.scanned = scanned

    async def run() -> None:
        try:
            job.found = await browse.find(caller, queue, search, progress=progress)
        except Exception as exc:  # noqa: BLE001 - shown on the page by the poll that reads the job
            job.error = exc
        finally:
            job.ended = time.monotonic()
            job.done.set()

    job.task = asyncio.get_running_loop().create_task(run())
    return job_id


async def wait(job_id: str, seconds: float) -> Job | None:
    """The job after at most ``seconds`` of waiting for it to end."""
    job = _jobs.get(job_id)
    if job is not None and not job.done.is_set():
        try:
            await asyncio.wait_for(asyncio.shield(job.done.wait()), seconds)
        except TimeoutError:
            pass
    return job


def owned(job_id: str, owner: tuple[int, int], queue: str) -> Job | None:
    job = _jobs.get(job_id)
    return job if job is not None and job.owner == owner and job.queue == queue else None
