"""Transactions on the brokers: the transaction coordinator (transactional ids, their state and markers)."""
