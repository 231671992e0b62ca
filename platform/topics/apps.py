from django.apps import AppConfig


class TopicsConfig(AppConfig):
    name = "tideway_server.topics"
    label = "topics"
    verbose_name = "Queues and topics"
    default_auto_field = "django.db.models.BigAutoField"
