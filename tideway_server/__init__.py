"""Tideway's server: every server package lives under this one name, so none can collide with another project's.

    tideway_server.brokers          the data plane (brokers/)
    tideway_server.controlplane     settings, URLs, the ASGI entry, the Celery app (platform/controlplane/)
    tideway_server.clusters, .tenants, .topics, .registry, .gateway, .lag, .alerts
                                    the control plane's Django apps (platform/<app>/)
    tideway_server.billing          plans' prices, usage rollups, invoices (billing/)
    tideway_server.webui            the console (webui/)
    tideway_server.spark_analytics  the Spark jobs and data source (spark_analytics/)
    tideway_server.cli              the ``tideway`` command (this folder's cli/)

Installed (a wheel of the repository's root pyproject.toml, built by its setup.py), these are ordinary subpackages
of this folder. In a source checkout they stay in the repository's own folders, which stay what they are; this
package then lists those folders as its ``__path__``, so the same import names work from a clone (pytest, the
subprocesses the tests start, ``python -m tideway_server.cli.main``) without installing anything. The client,
``tideway``, is a distribution of its own and is not under this name.
"""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent
_CHECKOUT = _HERE.parent

# A source checkout: the repository's folders are this package's. (Installed, the folder next to this one is
# site-packages, which has no manage.py and no platform/controlplane.)
if (_CHECKOUT / "manage.py").is_file() and (_CHECKOUT / "platform" / "controlplane").is_dir():
    __path__ = [str(_HERE), str(_CHECKOUT), str(_CHECKOUT / "platform")]
