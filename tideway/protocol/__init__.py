"""Tideway's native protocol: framing (pure codec) and versioned messages."""
