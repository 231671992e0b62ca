"""Compression codecs of the records section of a batch (attributes bits 0-2).

The numbers are Kafka's, so batches stay readable by Kafka tooling. lz4 uses
the LZ4 frame format, as Kafka does since message format v1.

snappy is read in both framings Kafka clients write (Java's: xerial's
``\x82SNAPPY\x00`` header and length-prefixed blocks; raw snappy from
others) and written in Java's, which every Kafka client reads.

lz4, zstd and snappy need libraries the client distribution leaves to an extra
(``pip install 'tideway[compression]'``: 30 MB, most of a client's weight);
the server always has them. Without them, gzip and uncompressed batches work
and an lz4, zstd or snappy batch raises an ImportError that says what to install.
"""

from __future__ import annotations

import enum
import gzip
import struct

__all__ = ["Compression", "compress", "decompress"]


class Compression(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, name: str | None) -> Compression:
        """Return the codec named ``name`` ("none", "gzip", "snappy", "lz4", "zstd")."""
        if name is None:
            return cls.NONE
        try:
            codec = cls[name.upper()]
        except KeyError:
            raise ValueError(f"unknown compression {name!r}; use none, gzip, snappy, lz4 or zstd") from None
        return codec


def _library(name: str, codec: str):
    try:
        if name == "lz4":
            import lz4.frame

            return lz4.frame
        if name == "cramjam":
            import cramjam

            return cramjam
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
    if codec is Compression.SNAPPY:
        return _snappy_compress(data)
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
    if codec == Compression.SNAPPY:
        return _snappy_decompress(bytes(data))
    raise ValueError(f"cannot decompress codec {codec}")


_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_BYTES = 16  # the magic, then two int32 versions
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # version 1, compatible with version 1 (as Java writes)
_XERIAL_BLOCK_BYTES = 32 * 1024  # Java's SnappyOutputStream compresses 32 KiB at a time
_BLOCK_LENGTH = struct.Struct(">i")


def _snappy_compress(data: bytes) -> bytes:
    """Java's framing: the header, then each 32 KiB of ``data`` compressed, behind its int32 length."""
    snappy = _library("cramjam", "snappy").snappy
    out = bytearray(_XERIAL_HEADER)
    for start in range(0, len(data), _XERIAL_BLOCK_BYTES):
        block = bytes(snappy.compress_raw(data[start:start + _XERIAL_BLOCK_BYTES]))
        out += _BLOCK_LENGTH.pack(len(block)) + block
    return bytes(out)


def _snappy_decompress(data: bytes) -> bytes:
    """Java's framing (xerial: a header, then blocks each behind its int32 length) or one raw snappy block."""
    snappy = _library("cramjam", "snappy").snappy
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(snappy.decompress_raw(data))
    out = bytearray()
    position = _XERIAL_HEADER_BYTES
    while position < len(data):
        if position + 4 > len(data):
            raise ValueError("a snappy block's length is cut short")
        (length,) = _BLOCK_LENGTH.unpack_from(data, position)
        position += 4
        if length < 0 or position + length > len(data):
            raise ValueError(f"a snappy block of {length} bytes runs past the batch")
        out += bytes(snappy.decompress_raw(data[position:position + length]))
        position += length
    return bytes(out)
