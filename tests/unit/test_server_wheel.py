"""The server installs under one name (issue 41): ``tideway_server``, nothing generic in site-packages.

Builds the server wheel from the repository's root (setup.py maps brokers/, billing/, webui/, spark_analytics/ and
platform/'s apps under tideway_server), lists what it would put in site-packages, then installs it into a folder
of its own and starts Django from there, away from the checkout: the apps, their migrations, the console's
templates and static files and the ``tideway`` command must all come from the installed copy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import pytest

from tests.harness.processes import REPO_ROOT

pytestmark = pytest.mark.timeout(300)

PROGRAM = r'''
import json, os, sys
import django
import tideway_server
from tideway_server.cli.django_setup import setup_django

setup_django()
from django.contrib.staticfiles import finders
from django.db.migrations.loader import MigrationLoader
from django.template.loader import get_template

import tideway_server.brokers.storage.log
import tideway_server.gateway.pool
from django.apps import apps

print(json.dumps({
    "package_path": list(tideway_server.__path__),
    "modules": [tideway_server.brokers.storage.log.__file__, tideway_server.gateway.pool.__file__],
    "apps": sorted((a.label, a.path) for a in apps.get_app_configs() if a.name.startswith("tideway_server.")),
    "template": get_template("webui/base.html").origin.name,
    "static": finders.find("webui/vendor/htmx-2.0.4.min.js"),
    "migrations": sorted({sys.modules[type(m).__module__].__file__
                          for m in MigrationLoader(None, ignore_no_migrations=True).disk_migrations.values()}),
}))
'''


def test_the_server_wheel_installs_everything_under_tideway_server(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "--disable-pip-version-check",
                    "-w", str(dist), str(REPO_ROOT)], check=True, cwd=tmp_path, capture_output=True)
    [wheel] = dist.glob("tideway_server-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names}
    print(f"server wheel: {wheel.name}, {wheel.stat().st_size:,} bytes, {len(names)} files; top level: {sorted(top_level)}")
    assert {t for t in top_level if not t.endswith(".dist-info")} == {"tideway_server"}, top_level
    for expected in ("tideway_server/brokers/storage/log.py", "tideway_server/gateway/pool.py",
                     "tideway_server/tenants/migrations/0001_initial.py", "tideway_server/cli/main.py",
                     "tideway_server/webui/templates/webui/base.html", "tideway_server/webui/static/webui/console.css",
                     "tideway_server/spark_analytics/source.py", "tideway_server/billing/models/usage.py"):
        assert expected in names, expected
    assert not any(name.startswith(("tideway_server/tests/", "tideway_server/bench/", "tideway/")) for name in names)

    # Installed into a folder of its own and run from elsewhere: nothing may come from the checkout.
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--disable-pip-version-check",
                    "--target", str(target), str(wheel)], check=True, cwd=tmp_path, capture_output=True)
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH")}
    env.update(PYTHONPATH=str(target), TIDEWAY_HOME=str(tmp_path / "home"))
    ran = subprocess.run([sys.executable, "-c", PROGRAM], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert ran.returncode == 0, ran.stderr[-3000:]
    out = json.loads(ran.stdout.strip().splitlines()[-1])
    installed = str(target / "tideway_server")
    assert out["package_path"] == [installed]  # the checkout's folders are not on it
    assert all(path.startswith(installed) for path in out["modules"]), out["modules"]
    labels = {label for label, _ in out["apps"]}
    assert labels == {"controlplane", "billing", "lag", "alerts", "clusters", "tenants", "topics", "registry",
                      "gateway", "webui"}, labels
    assert all(path.startswith(installed) for _, path in out["apps"]), out["apps"]
    assert out["template"].startswith(installed) and out["static"].startswith(installed), out
    ours = [path for path in out["migrations"] if "/django/" not in path]
    assert len(ours) >= 10 and all(path.startswith(installed) for path in ours), ours

    helped = subprocess.run([sys.executable, "-m", "tideway_server.cli.main", "--help"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "broker" in helped.stdout, helped.stderr[-2000:]
