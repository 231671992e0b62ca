"""One registry of HTTP error codes (issue 41): every code raised is registered, docs/api.md's table is the registry,
and the error classes take their status from it."""

from __future__ import annotations

import ast
import re

import pytest
from tideway_server.controlplane.error_codes import CODES

from tests.harness.processes import REPO_ROOT

ERROR_CLASSES = {"ActionError", "GatewayError", "error_body"}


def _raised_codes() -> dict[str, list[str]]:
    """Every constant code given to ActionError, GatewayError, error_body or not_found(code=...): {code: [where]}."""
    found: dict[str, list[str]] = {}
    for area in ("platform", "webui", "billing"):
        for path in (REPO_ROOT / area).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Call):
                    continue
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                codes = []
                if name in ERROR_CLASSES and node.args and isinstance(node.args[0], ast.Constant):
                    codes.append(node.args[0].value)
                if name == "not_found":
                    codes += [kw.value.value for kw in node.keywords if kw.arg == "code" and isinstance(kw.value, ast.Constant)]
                for code in codes:
                    found.setdefault(code, []).append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    return found


def _documented() -> dict[str, tuple[int, int, bool]]:
    text = (REPO_ROOT / "docs" / "api.md").read_text()
    table = text[text.index("| code | HTTP | error_code | retry as is | when |"):]
    rows = {}
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        [code] = re.findall(r"`([a-z_]+)`", cells[0])
        rows[code] = (int(cells[1]), int(cells[2]), cells[3] == "yes")
    return rows


def test_every_code_raised_is_registered():
    unknown = {code: where for code, where in _raised_codes().items() if code not in CODES}
    assert not unknown, f"codes raised but not registered in controlplane/error_codes.py: {unknown}"


def test_the_docs_table_is_the_registry():
    documented = _documented()
    registered = {e.code: (e.status, e.error_code, e.retriable) for e in CODES.values()}
    assert documented == registered


def test_the_error_classes_take_their_status_from_the_registry_and_refuse_unknown_codes():
    from tideway_server.controlplane.errors import ActionError
    from tideway_server.gateway.errors import GatewayError

    quota = ActionError("quota_exceeded", "no")
    assert (quota.status, quota.error_code) == (403, 40301)
    assert GatewayError("throttled", "wait").status == 429
    assert GatewayError("internal_error", "bug").body()["error_code"] == 50001
    for make in (ActionError, GatewayError):
        with pytest.raises(KeyError, match="not registered"):
            make("no_such_code", "?")
