"""Invariants whose breaking would lose or corrupt data, checked where the values they bind change.

TigerBeetle's style: a rule is stated where a value is set and checked again where it is relied on, so a bug
shows at the first place it breaks something rather than as lost records later. The checks are plain ``if``
statements raising ``InvariantError`` (Python's ``assert`` vanishes under ``-O``), on in tests and in
production: each costs a comparison or two per batch, per high-watermark move or per lock, next to the I/O
it guards. A broken invariant is a bug in Tideway, never a client's mistake: the request fails with an
unknown server error and the traceback is logged.

The rules:

* a partition's high watermark never passes its log end offset, and a leader's only grows;
* offsets only grow: a leader appends at its log end, a follower copies batches at its log end and never
  truncates records below its high watermark (committed, so on every in-sync replica) to follow a leader;
* leader epochs only grow: a partition's role changes and the epochs batches are stamped with;
* a share-partition locks only available records and unlocks only locked ones, so no record is held by two
  receivers, and its count of records in flight never goes below zero (``SharePartition.check`` verifies the
  whole window, for tests).
"""

from __future__ import annotations


class InvariantError(AssertionError):
    """A rule of the data that must always hold did not: a bug."""
