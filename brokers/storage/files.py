"""Small file helpers shared by the storage layer."""

from __future__ import annotations

import os

import msgspec

__all__ = ["fsync_directory", "take_snapshot", "write_atomically"]


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


def take_snapshot(path: str, kind: type, end_offset: int):
    """The msgpack snapshot of ``kind`` at ``path`` if it was written at exactly ``end_offset`` (a clean shutdown's),
    else None; the file is removed either way (stale as soon as anything is appended)."""
    try:
        with open(path, "rb") as f:
            snapshot = msgspec.msgpack.decode(f.read(), type=kind)
    except (FileNotFoundError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    finally:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    return snapshot if snapshot.end_offset == end_offset else None
