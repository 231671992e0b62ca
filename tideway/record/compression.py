"""Compression codecs of the records section of a batch (attributes bits 0-2).

The numbers are Kafka's, so batches stay readable by Kafka tooling. lz4 uses
the LZ4 frame format, as Kafka does since message format v1.

lz4 and zstd need libraries the client distribution leaves to an extra
(``pip install 'tideway[compression]'``: 30 MB, most of a client's weight);
the server always has them. Without them, gzip and uncompressed batches work
and an lz4 or zstd batch raises an ImportError that says what to install.
"""

from __future__ import annotations

import enum
import gzip

__all__ = ["Compression", "compress", "decompress"]


class Compression(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2  # accepted on the wire by value only; Tideway cannot decode it
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, name: str | None) -> Compression:
        """Return the codec named ``name`` ("none", "gzip", "lz4", "zstd")."""
        if name is None:
            return cls.NONE
        try:
            codec = cls[name.upper()]
        except KeyError:
            raise ValueError(f"unknown compression {name!r}; use none, gzip, lz4 or zstd") from None
        if codec is cls.SNAPPY:
            raise ValueError("snappy compression is not supported; use lz4 or zstd")
        return codec


def _library(name: str, codec: str):
    try:
        if name == "lz4":
            import lz4.frame

            return lz4.frame
        import zstandard

        return zstandard
    except ImportError:
        raise ImportError(f"{codec} batches need the {name} library: pip install 'tideway[compression]'") from None


def compress(codec: Compression, data: bytes) -> bytes:
    if codec is Compression.NONE:
        return data
    if codec is Compression.GZIP:
        return gzip.compress(data, compresslevel=6)
    if codec is Compression.LZ4:
        return _library("lz4", "lz4").compress(data)
    if codec is Compression.ZSTD:
        return _library("zstandard", "zstd").ZstdCompressor(level=3).compress(data)
    raise ValueError(f"cannot compress with {codec.name}")


def decompress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    if codec == Compression.GZIP:
        return gzip.decompress(data)
    if codec == Compression.LZ4:
        return _library("lz4", "lz4").decompress(bytes(data))
    if codec == Compression.ZSTD:
        zstandard = _library("zstandard", "zstd")
        # Kafka's producers do not always write the content size in the frame
        # header, so decompress as a stream rather than in one call.
        return zstandard.ZstdDecompressor().decompressobj().decompress(bytes(data))
    raise ValueError(f"cannot decompress codec {codec}")
