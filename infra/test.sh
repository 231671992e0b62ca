#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$repo/infra/setup.sh"
cd "$repo"
# Browser tests (marker "browser") run in their own pytest process: Playwright's
# sync API leaves an event loop in the test thread, which pytest-asyncio's tests then trip over.
status=0
.venv/bin/python -m pytest -m "not browser" --durations=30 "$@" || status=$?  # the slowest 30, for keeping it under 45 minutes
browser_status=0
.venv/bin/python -m pytest -m browser "$@" || browser_status=$?
# 5: no browser test selected (e.g. a path to other tests was given).
if [ "$browser_status" -ne 0 ] && [ "$browser_status" -ne 5 ]; then
    status=$browser_status
fi
exit $status
