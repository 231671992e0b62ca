"""Group coordination on the brokers: stream groups (offsets, membership) and queue groups."""
