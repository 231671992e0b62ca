"""The queue model: shared consumption with per-message acknowledgements."""
