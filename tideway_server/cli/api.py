"""Talking to the REST API from the CLI: where it is, the key, one request with the API's errors printed plainly."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def api_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--api", default=None,
                        help="the API's address (default: $TIDEWAY_API_URL, else the local `tideway up`, else "
                             "http://127.0.0.1:8000)")
    parser.add_argument("--api-key", default=os.environ.get("TIDEWAY_API_KEY"), help="your API key (default: $TIDEWAY_API_KEY)")


def api_url(args) -> str:
    if args.api:
        return args.api.rstrip("/")
    if os.environ.get("TIDEWAY_API_URL"):
        return os.environ["TIDEWAY_API_URL"].rstrip("/")
    deployment = Path(os.environ.get("TIDEWAY_HOME", "var")) / "deployment.json"
    try:
        return json.loads(deployment.read_text())["api"].rstrip("/")
    except (OSError, ValueError, KeyError):
        return "http://127.0.0.1:8000"


def call(args, method: str, path: str, *, params: dict | None = None, body: dict | None = None):
    """The answer to ``method path``; on an error the API's message is printed and the command exits 1."""
    import httpx

    if not args.api_key:
        print("tideway: give an API key with --api-key or TIDEWAY_API_KEY", file=sys.stderr)
        raise SystemExit(2)
    try:
        answer = httpx.request(method, api_url(args) + path, params=params, json=body,
                               headers={"Authorization": f"Bearer {args.api_key}"}, timeout=30)
    except httpx.HTTPError as exc:
        print(f"tideway: the API at {api_url(args)} did not answer: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    if answer.status_code >= 400:
        try:
            error = answer.json()
            print(f"tideway: {error.get('message', answer.text)} ({error.get('code', answer.status_code)})", file=sys.stderr)
        except ValueError:
            print(f"tideway: HTTP {answer.status_code}: {answer.text[:200]}", file=sys.stderr)
        raise SystemExit(1)
    return answer
