"""Tenants' queues and topics: their settings, quotas and placement on broker clusters."""
