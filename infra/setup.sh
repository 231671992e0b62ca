#!/usr/bin/env bash
# Installs everything Tideway needs on a fresh Debian machine (run as root, from
# any directory): system packages when missing, then a virtualenv at .venv in
# the repo root with Tideway and its development tools.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

apt_missing=()
python3 -c 'import venv, ensurepip' 2>/dev/null || apt_missing+=(python3-venv)
# gcc and Python's headers build the record decoder's C fast path (tideway/pyproject.toml) and wheels that compile.
command -v gcc >/dev/null 2>&1 || apt_missing+=(gcc)
python3 -c 'import os, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' 2>/dev/null \
    || apt_missing+=(python3-dev)
# The test suite runs the controller on PostgreSQL too, in a cluster of its own.
command -v pg_createcluster >/dev/null 2>&1 || apt_missing+=(postgresql)
# Redis: Celery's broker, rate-limit buckets, dedup windows (started by Tideway on a port of its own).
command -v redis-server >/dev/null 2>&1 || apt_missing+=(redis-server)
# Browser tests drive Debian's Chromium through Playwright (never `playwright install`).
command -v chromium >/dev/null 2>&1 || apt_missing+=(chromium)
# kcat: a Kafka tool nobody here wrote, driven against the brokers' Kafka listeners (tests/kafka).
command -v kcat >/dev/null 2>&1 || apt_missing+=(kcat)
# The network-fault tests (tests/nemesis) give each process a host of its own (ip netns, veth pairs, a bridge) and
# cut links between them with nftables; HAProxy balances several gateways there.
command -v ip >/dev/null 2>&1 || apt_missing+=(iproute2)
command -v nft >/dev/null 2>&1 || apt_missing+=(nftables)
command -v haproxy >/dev/null 2>&1 || apt_missing+=(haproxy)
# libfaketime jumps one broker's wall clock in the clock nemesis.
command -v faketime >/dev/null 2>&1 || apt_missing+=(faketime)
# The SQS endpoint's tests speak the query protocol with Debian's boto3 1.26 (outside the virtualenv).
/usr/bin/python3 -c 'import boto3' 2>/dev/null || apt_missing+=(python3-boto3)
# ... and with the AWS JavaScript SDK under Node.js (npm installs it in tests/sqs/js, below).
command -v node >/dev/null 2>&1 || apt_missing+=(nodejs)
command -v npm >/dev/null 2>&1 || apt_missing+=(npm)
# Spark (PySpark) runs on a JVM: Java 17 or newer.
command -v java >/dev/null 2>&1 || apt_missing+=(default-jre-headless)
if [ ${#apt_missing[@]} -gt 0 ]; then
    echo "setup: installing system packages: ${apt_missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q "${apt_missing[@]}"
fi

if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv" >&2
    python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
# Two distributions from this repository: the client (./tideway: SDK, native client, wire codecs) and the
# server (.: everything else), which depends on the client.
echo "setup: installing Tideway into .venv (pip install -e ./tideway -e '.[dev]')" >&2
.venv/bin/python -m pip install -q --disable-pip-version-check -e ./tideway -e '.[dev]'
# The C record decoder is optional to the client's build (tideway/pyproject.toml): say so when it did not compile.
.venv/bin/python -c 'import tideway.record._records' 2>/dev/null \
    || echo "setup: WARNING: the C record decoder (tideway/record/_records.c) did not build; records decode in Python, about ten times slower" >&2
# The AWS JavaScript SDK for the SQS endpoint's tests, pinned by tests/sqs/js/package-lock.json.
if [ ! -d tests/sqs/js/node_modules/@aws-sdk/client-sqs ]; then
    echo "setup: installing @aws-sdk/client-sqs (npm ci in tests/sqs/js)" >&2
    (cd tests/sqs/js && npm ci --no-audit --no-fund --loglevel=error)
fi
echo "setup: done" >&2
