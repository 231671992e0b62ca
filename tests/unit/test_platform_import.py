"""platform/ must never shadow the standard library's ``platform`` module (issue 2)."""

import subprocess
import sys
import sysconfig

from tests.harness.processes import REPO_ROOT


def test_import_platform_is_stdlib_under_pytest():
    import platform

    assert platform.__file__.startswith(sysconfig.get_paths()["stdlib"])
    assert platform.system()  # the stdlib API works


def test_import_platform_is_stdlib_under_manage_py():
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", "import platform; print(platform.__file__); print(platform.system())"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert sysconfig.get_paths()["stdlib"] in result.stdout
    assert "/platform/__init__.py" not in result.stdout


def test_platform_folder_has_no_init():
    assert not (REPO_ROOT / "platform" / "__init__.py").exists()


def test_every_django_app_imports_from_anywhere_as_the_installed_package():
    """The Celery workers of `tideway up` run from any directory: each app must import by its installed name
    (tideway_server.<app>, setup.py's mapping), not only from the checkout (a new app once was not)."""
    script = ("import sys; sys.path = [p for p in sys.path if p not in ('', '.')]; "
              "import importlib; from tideway_server.controlplane import settings; "
              "[importlib.import_module(a.removesuffix('.apps.ControlPlaneConfig')) for a in settings.INSTALLED_APPS]; "
              "bare = [m for m in sys.modules if m.split('.')[0] in ('gateway', 'brokers', 'tenants', 'controlplane')]; "
              "print(bare or 'ok')")
    result = subprocess.run([sys.executable, "-c", script], cwd="/", capture_output=True, text=True, timeout=60,
                            env={"PATH": "/usr/bin:/bin", "TIDEWAY_HOME": "/tmp"})
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]
