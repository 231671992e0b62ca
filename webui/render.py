"""The one helper that decides between a whole page and an HTMX partial."""

from __future__ import annotations

from django.shortcuts import render


def page(request, template: str, context: dict, *, partial: str | None = None, status: int = 200):
    """``webui/<template>`` for a normal request; ``webui/htmx/<partial>`` when HTMX asks for a piece of it.

    Every page template includes its partials, so both answers come from the same markup.
    """
    principal = getattr(request, "principal", None)
    context = {"principal": principal, "may_manage": bool(principal and principal.has_scope("manage")), **context}
    if partial is not None and request.headers.get("HX-Request") == "true" and not request.headers.get("HX-Boosted"):
        return render(request, f"webui/htmx/{partial}", context, status=status)
    return render(request, f"webui/{template}", context, status=status)
