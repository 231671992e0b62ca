"""The site's 404 and 500 answers: a console page for the console's paths (with its navigation and one plain
sentence), the API's one JSON shape for everything else."""

from __future__ import annotations

from django.urls import Resolver404
from tideway_server.controlplane.api.errors import json_404, json_500
from tideway_server.webui.access import console_principal
from tideway_server.webui.render import error_page

CONSOLE = "/console/"


def _for_console(request) -> bool:
    if not request.path.startswith(CONSOLE):
        return False
    try:
        request.principal = console_principal(request)
    except Exception:  # noqa: BLE001 - an error page must not fail for want of its navigation
        request.principal = None
    return True


def not_found(request, exception=None):
    if not _for_console(request):
        return json_404(request, exception)
    said = exception.args[0] if exception is not None and exception.args else None
    if isinstance(said, str) and said and not isinstance(exception, Resolver404):  # a view's own words
        return error_page(request, 404, f"{said[0].upper()}{said[1:]}.")
    return error_page(request, 404, "There is no such page: it may have been deleted, or the link is mistyped.")


def server_error(request):
    if not _for_console(request):
        return json_500(request)
    return error_page(request, 500, "The console failed to show this page. It was logged; try again in a moment.")
