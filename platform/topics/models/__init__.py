from topics.models.queues import Queue

__all__ = ["Queue"]
