class InvalidSchema(Exception):
    """Raised when a schema's text is not a valid schema of its type."""
