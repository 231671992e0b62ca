from tideway_server.topics.models.queues import Queue

__all__ = ["Queue"]
