#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$repo/infra/setup.sh"
cd "$repo"
# Browser tests (marker "browser") run in their own pytest process: Playwright's
# sync API leaves an event loop in the test thread (see RECIPES.md).
.venv/bin/python -m pytest -m "not browser" "$@"
status=$?
exit $status
