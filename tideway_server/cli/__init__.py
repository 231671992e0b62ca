"""The ``tideway`` command: one entry point for every process and tool."""
