#!/usr/bin/env bash
# Set up (idempotent) and run Tideway on this machine: `tideway up` starts the
# controller and a 3-broker cluster on 127.0.0.1 with all state under
# $TIDEWAY_HOME (default var/) and the database named by DATABASE_URL (default
# SQLite under $TIDEWAY_HOME). Ctrl-C stops everything cleanly.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$repo/infra/setup.sh"
cd "$repo"
exec .venv/bin/tideway up "$@"
