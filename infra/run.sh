#!/usr/bin/env bash
# Set up (idempotent) and run Tideway on this machine: for now one broker on
# 127.0.0.1:9401 with its data under $TIDEWAY_HOME (default var/). Ctrl-C stops
# it cleanly.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$repo/infra/setup.sh"
cd "$repo"
home="${TIDEWAY_HOME:-var}"
mkdir -p "$home"
echo "Tideway broker 1 on 127.0.0.1:9401 (data in $home/b1, metrics on http://127.0.0.1:10401/metrics); Ctrl-C to stop" >&2
exec .venv/bin/tideway broker --id 1 --data "$home/b1" --listen 127.0.0.1:9401
