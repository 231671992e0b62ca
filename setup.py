"""Where the server distribution's packages come from: every server folder under one parent name.

The folders stay what they are (brokers/, billing/, webui/, spark_analytics/ and platform/'s Django apps); installed,
each becomes a subpackage of ``tideway_server`` (tideway_server/__init__.py says how a source checkout finds them),
so no server package takes a generic top-level name (``gateway``, ``registry``, ``topics``) in site-packages.
The project's metadata and dependencies are in pyproject.toml; this file only maps folders to package names.
"""

from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent
PLATFORM_APPS = sorted(p.name for p in (HERE / "platform").iterdir() if (p / "__init__.py").is_file())
FOLDERS = {"brokers": "brokers", "billing": "billing", "webui": "webui", "spark_analytics": "spark_analytics",
           **{app: f"platform/{app}" for app in PLATFORM_APPS}}

packages = ["tideway_server", *(f"tideway_server.{p}" for p in find_packages("tideway_server"))]
package_dir = {"tideway_server": "tideway_server"}
for name, folder in FOLDERS.items():
    package_dir[f"tideway_server.{name}"] = folder
    packages += [f"tideway_server.{name}", *(f"tideway_server.{name}.{p}" for p in find_packages(folder))]

setup(
    packages=packages,
    package_dir=package_dir,
    # The console's templates and pinned static assets (no CDN at run time).
    package_data={"tideway_server.webui": ["templates/webui/*.html", "templates/webui/htmx/*.html",
                                           "static/webui/*", "static/webui/vendor/*"]},
)
