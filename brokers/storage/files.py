"""Small file helpers shared by the storage layer."""

from __future__ import annotations

import os

__all__ = ["fsync_directory", "write_atomically"]


def write_atomically(path: str, data: bytes, *, sync_directory: bool = True, sync_file: bool = True,
                     temporary: str | None = None) -> None:
    """Replace ``path`` with ``data`` so a crash leaves either the old or the new file.

    Written to ``path.tmp``, fsynced, renamed over ``path``; with
    ``sync_directory`` the directory is fsynced too, so the rename itself survives.
    Without ``sync_file`` a power cut may leave an empty file (for hints that
    are cheap to rebuild). Two threads writing one file each pass a ``temporary`` of
    their own (its name ending in ``.tmp``, which start-up removes).
    """
    temporary = path + ".tmp" if temporary is None else temporary
    with open(temporary, "wb") as f:
        f.write(data)
        f.flush()
        if sync_file:
            os.fsync(f.fileno())
    os.replace(temporary, path)
    if sync_directory:
        fsync_directory(os.path.dirname(path))


def fsync_directory(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
