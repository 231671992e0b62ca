"""Dependencies run one way (issue 41): the layers of docs/architecture.md, checked on every import.

From the top down: the CLI (tideway_server/cli), the console (webui), billing, the control plane (platform/'s
apps), the Spark jobs (spark_analytics), the brokers, and the client distribution (tideway: SDK, native client,
wire codecs). A module may import its own layer and the layers below it, never one above; imports inside
functions count the same. Besides: nothing below the CLI imports it; the brokers never import Django; the client
imports nothing but itself, the standard library and its own dependencies; no module takes another package's
private names (``from tideway_server.alerts.tasks import _live``); the console acts only through the control
plane's actions and the gateway's operations: it never imports the broker client or codecs (``tideway``), the
gateway's insides (its pool, catalog, keys, Redis limits: only ``gateway.operations``, ``gateway.publishing``
and ``gateway.errors``), nor the control plane's broker calls (``clusters.admin``, the controller, the
provisioners); every server module is imported by its one
installed name, ``tideway_server.<package>`` (a bare ``gateway`` or ``brokers`` would not exist once installed,
and in a checkout would load a second copy of the module).

The checker reads the source (ast), so it sees imports that never run in a test; a test of the checker on a
made-up tree shows it fails on each kind of forbidden import.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.harness.processes import REPO_ROOT

LAYERS = ["cli", "webui", "billing", "platform", "spark_analytics", "brokers", "tideway"]  # top first
CLIENT_DEPENDENCIES = {"msgspec", "crc32c", "httpx", "websockets", "lz4", "zstandard", "cramjam"}
# What the console may take from the gateway: its operations (and publishing, one of them) and their refusals.
CONSOLE_GATEWAY = {"operations", "publishing", "errors"}
# The control plane's modules that call brokers or run the cluster: the console goes through actions instead.
CONSOLE_NEVER = ("tideway_server.clusters.admin", "tideway_server.clusters.controller",
                 "tideway_server.clusters.provisioning")
SKIPPED = {".venv", "tests", "bench", "infra", "migrations", "__pycache__", "node_modules", "build"}  # build/: wheels' copies


@dataclass(frozen=True)
class Import:
    path: Path  # relative to the root
    line: int
    module: str  # absolute module imported
    names: tuple[str, ...]  # names taken from it (``from m import a, b``), or ()


SERVER = "tideway_server"  # the server's one installed name: tideway_server.brokers, tideway_server.gateway, ...


def platform_apps(root: Path) -> set[str]:
    return {p.name for p in (root / "platform").iterdir() if (p / "__init__.py").exists()} if (root / "platform").is_dir() else set()


def server_packages(root: Path) -> set[str]:
    """The names under tideway_server: the CLI, the top-level server folders and platform/'s apps."""
    return {"cli", "webui", "billing", "spark_analytics", "brokers"} | platform_apps(root)


def layer_of_module(module: str, apps: set[str]) -> str | None:
    parts = module.split(".")
    if parts[0] == "tideway":
        return "tideway"
    if parts[0] != SERVER or len(parts) < 2:
        return None
    return "platform" if parts[1] in apps else parts[1] if parts[1] in LAYERS else None


def layer_of_file(path: Path) -> str:
    return path.parts[1] if path.parts[0] == SERVER and len(path.parts) > 2 else path.parts[0]


def package_of_module(module: str) -> str:
    """The package a module belongs to for the private-names rule: tideway_server.<package>, or tideway."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == SERVER else parts[0]


def package_of_file(path: Path) -> str:
    parts = path.parts
    if parts[0] == SERVER:
        return f"{SERVER}.{parts[1]}"
    if parts[0] == "platform":
        return f"{SERVER}.{parts[1]}"
    return parts[0] if parts[0] == "tideway" else f"{SERVER}.{parts[0]}"


def imports(root: Path, skipped: set[str] = SKIPPED):
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if skipped & set(relative.parts) or len(relative.parts) < 2:
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
    # Everywhere, tests, benches and migrations too: a server module by its installed name only.
    bare = server_packages(root) | {"tideway_cli"}
    for item in imports(root, {".venv", "__pycache__", "node_modules", "build"}):
        top = item.module.split(".")[0]
        if top in bare:
            found.append(f"{item.path}:{item.line} imports {item.module}: server modules are imported as "
                         f"{SERVER}.{top}, their installed name")
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
        if source == "webui" and target is not None:
            found += [f"{where}: {why}" for why in console_refusals(item)]
        if target is not None:
            if package_of_module(item.module) != package_of_file(item.path):
                private = [n for n in item.names if n.startswith("_")]
                private += [part for part in item.module.split(".")[1:] if part.startswith("_") and part != "__init__"
                            and not part.startswith("__")]
                if private:
                    found.append(f"{where}: takes private {', '.join(private)} from another package")
    return found


def console_refusals(item: Import) -> list[str]:
    """Why the console may not make this import (nothing when it may)."""
    parts = item.module.split(".")
    if parts[0] == "tideway":
        return ["the console reaches brokers only through the gateway's operations, never the client or codecs"]
    modules = [f"{item.module}.{name}" for name in item.names] if len(parts) == 2 else [item.module]
    why = []
    for module in modules:
        inner = module.split(".")
        if inner[1] == "gateway" and len(inner) > 2 and inner[2] not in CONSOLE_GATEWAY:
            why.append(f"the console uses the gateway's operations, not gateway.{inner[2]}")
        if module.startswith(CONSOLE_NEVER):
            why.append(f"the console acts through the control plane's actions, not {module}")
    return why


def test_every_import_runs_down_the_layers():
    found = violations(REPO_ROOT)
    assert not found, "imports against the layers:\n" + "\n".join(found)


def test_the_checker_fails_on_each_kind_of_forbidden_import(tmp_path):
    files = {
        "tideway/ok.py": "import json\nimport msgspec\nfrom tideway.protocol import errors\n",
        "tideway/server.py": "from tideway_server.brokers.storage import log\n",  # up a layer
        "tideway/heavy.py": "import redis\n",  # not a client dependency
        "brokers/web.py": "def f():\n    from django.conf import settings\n",  # Django, inside a function
        "platform/gateway/__init__.py": "",
        "platform/gateway/bill.py": "from tideway_server.billing.pricing import price\n",  # control plane up to billing
        "platform/gateway/cli.py": "import tideway_server.cli.main\n",  # up to the CLI
        "platform/alerts/__init__.py": "",
        "platform/clusters/__init__.py": "",
        # a private name
        "webui/views.py": "from tideway_server.alerts.tasks import _live\nfrom tideway_server.gateway import operations\n",
        "billing/ok.py": "from tideway_server.tenants.models import Plan\nfrom tideway.native import TidewayClient\n",
        "billing/bare.py": "from gateway.wire import decode\n",  # not by its installed name
        "tideway_server/cli/ok.py": "from tideway_server.webui import views\nfrom tideway_server.brokers import cli\n",
        # the console around the gateway's operations and the control plane's actions
        "webui/ok.py": "from tideway_server.gateway.operations import browse\nfrom tideway_server.gateway import errors\n"
                       "from tideway_server.topics.actions import do_create_queue\n",
        "webui/pool.py": "from tideway_server.gateway import pool, operations\n",
        "webui/native.py": "from tideway.native.group import describe_group\n",
        "webui/admin.py": "def f():\n    from tideway_server.clusters.admin import partition_states\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = violations(tmp_path)
    assert len(found) == 10, "\n".join(found)
    for culprit in ("tideway/server.py", "tideway/heavy.py", "brokers/web.py", "platform/gateway/bill.py",
                    "platform/gateway/cli.py", "webui/views.py", "billing/bare.py", "webui/pool.py", "webui/native.py",
                    "webui/admin.py"):
        assert any(line.startswith(culprit) for line in found), (culprit, found)
