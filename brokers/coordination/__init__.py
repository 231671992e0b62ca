"""Coordinators' shared machinery: the internal compacted topics that hold their state."""
