from django.apps import AppConfig


class WebUIConfig(AppConfig):
    name = "tideway_server.webui"
    label = "webui"
    verbose_name = "Tideway console"
