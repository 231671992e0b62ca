#!/usr/bin/env python
"""Django's command-line utility for the Tideway control plane.

platform/ holds the Django apps but is not a package (a package named
``platform`` would shadow the standard library's), so it is put on sys.path.
"""

import os
import sys

ROOT = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    sys.path.insert(0, os.path.join(ROOT, "platform"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
