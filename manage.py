#!/usr/bin/env python
"""Django's command-line utility for the Tideway control plane.

The Django apps are ``tideway_server.<app>`` (their code in platform/, billing/ and webui/): platform/ is a folder,
never a package, because a package named ``platform`` would shadow the standard library's.
"""

import os
import sys

ROOT = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    sys.path.insert(0, ROOT)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tideway_server.controlplane.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
