"""Tenants, their members, API keys and the audit log of management actions."""
