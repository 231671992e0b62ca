from django.apps import AppConfig


class WebUIConfig(AppConfig):
    name = "webui"
    verbose_name = "Tideway console"
