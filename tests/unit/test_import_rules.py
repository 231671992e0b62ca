"""Dependencies run one way (issue 41): the layers of docs/architecture.md, checked on every import.

From the top down: the CLI (tideway_cli), the console (webui), billing, the control plane (platform/'s apps),
the Spark jobs (spark_analytics), the brokers, and the client distribution (tideway: SDK, native client, wire
codecs). A module may import its own layer and the layers below it, never one above; imports inside functions
count the same. Besides: nothing below the CLI imports it; the brokers never import Django; the client imports
nothing but itself, the standard library and its own dependencies; no module takes another package's private
names (``from alerts.tasks import _live``).

The checker reads the source (ast), so it sees imports that never run in a test; a test of the checker on a
made-up tree shows it fails on each kind of forbidden import.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.harness.processes import REPO_ROOT

LAYERS = ["tideway_cli", "webui", "billing", "platform", "spark_analytics", "brokers", "tideway"]  # top first
CLIENT_DEPENDENCIES = {"msgspec", "crc32c", "httpx", "websockets", "lz4", "zstandard"}
SKIPPED = {".venv", "tests", "bench", "infra", "migrations", "__pycache__", "node_modules"}


@dataclass(frozen=True)
class Import:
    path: Path  # relative to the root
    line: int
    module: str  # absolute module imported
    names: tuple[str, ...]  # names taken from it (``from m import a, b``), or ()


def platform_apps(root: Path) -> set[str]:
    return {p.name for p in (root / "platform").iterdir() if (p / "__init__.py").exists()} if (root / "platform").is_dir() else set()


def layer_of_module(module: str, apps: set[str]) -> str | None:
    top = module.split(".")[0]
    if top in apps:
        return "platform"
    return top if top in LAYERS else None


def layer_of_file(path: Path) -> str:
    return path.parts[0]


def package_of(module_or_path: str) -> str:
    """The package a module belongs to for the private-names rule: a platform app, or a top-level package."""
    parts = module_or_path.split(".")
    return parts[1] if parts[0] == "platform" and len(parts) > 1 else parts[0]


def imports(root: Path):
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if SKIPPED & set(relative.parts) or len(relative.parts) < 2:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield Import(relative, node.lineno, alias.name, ())
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                yield Import(relative, node.lineno, node.module, tuple(a.name for a in node.names))


def violations(root: Path) -> list[str]:
    apps = platform_apps(root)
    stdlib = set(sys.stdlib_module_names)
    found = []
    for item in imports(root):
        source = layer_of_file(item.path)
        if source not in LAYERS:
            continue
        where = f"{item.path}:{item.line} imports {item.module}"
        target = layer_of_module(item.module, apps)
        if target is not None and LAYERS.index(target) < LAYERS.index(source):
            found.append(f"{where}: {source} may not import {target}, a layer above it")
        top = item.module.split(".")[0]
        if source == "brokers" and top == "django":
            found.append(f"{where}: the brokers never import Django")
        if source == "tideway" and target is None and top not in stdlib and top not in CLIENT_DEPENDENCIES:
            found.append(f"{where}: the client distribution imports only itself, the standard library and "
                         f"{sorted(CLIENT_DEPENDENCIES)}")
        if target is not None:
            own = package_of(".".join(item.path.with_suffix("").parts))
            if package_of(item.module) != own:
                private = [n for n in item.names if n.startswith("_")]
                private += [part for part in item.module.split(".")[1:] if part.startswith("_") and part != "__init__"
                            and not part.startswith("__")]
                if private:
                    found.append(f"{where}: takes private {', '.join(private)} from another package")
    return found


def test_every_import_runs_down_the_layers():
    found = violations(REPO_ROOT)
    assert not found, "imports against the layers:\n" + "\n".join(found)


def test_the_checker_fails_on_each_kind_of_forbidden_import(tmp_path):
    files = {
        "tideway/ok.py": "import json\nimport msgspec\nfrom tideway.protocol import errors\n",
        "tideway/server.py": "from brokers.storage import log\n",  # up a layer
        "tideway/heavy.py": "import redis\n",  # not a client dependency
        "brokers/web.py": "def f():\n    from django.conf import settings\n",  # Django, inside a function
        "platform/gateway/__init__.py": "",
        "platform/gateway/bill.py": "from billing.pricing import price\n",  # control plane up to billing
        "platform/gateway/cli.py": "import tideway_cli.main\n",  # up to the CLI
        "platform/alerts/__init__.py": "",
        "webui/views.py": "from alerts.tasks import _live\nfrom gateway import operations\n",  # private name
        "billing/ok.py": "from tenants.models import Plan\nfrom tideway.native import TidewayClient\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = violations(tmp_path)
    assert len(found) == 6, "\n".join(found)
    for culprit in ("tideway/server.py", "tideway/heavy.py", "brokers/web.py", "platform/gateway/bill.py",
                    "platform/gateway/cli.py", "webui/views.py"):
        assert any(line.startswith(culprit) for line in found), (culprit, found)
