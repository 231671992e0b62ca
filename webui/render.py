"""The one helper that decides between a whole page and an HTMX partial."""

from __future__ import annotations

from django.shortcuts import render


def page(request, template: str, context: dict, *, partial: str | None = None, status: int = 200):
    """``webui/<template>`` for a normal request; ``webui/htmx/<partial>`` when HTMX asks for a piece of it.

    Every page template includes its partials, so both answers come from the same markup.
    """
    principal = getattr(request, "principal", None)
    context = {"principal": principal, "may_manage": bool(principal and principal.has_scope("manage")),
               "may_consume": bool(principal and principal.has_scope("consume")), **context}
    if partial is not None and request.headers.get("HX-Request") == "true" and not request.headers.get("HX-Boosted"):
        return render(request, f"webui/htmx/{partial}", context, status=status)
    return render(request, f"webui/{template}", context, status=status)


ERROR_TITLES = {400: "That did not work", 403: "Not allowed", 404: "Not found", 500: "Something went wrong",
                502: "The brokers refused", 503: "The brokers cannot be reached"}


def error_page(request, status: int, sentence: str):
    """A console page for an error (never the API's JSON, never bare text): the navigation, a title, one plain
    sentence and a way back. An HTMX request for a piece of a page gets the sentence alone, answered 200 so that
    HTMX puts it where the piece would have gone (it leaves a 4xx answer out)."""
    principal = getattr(request, "principal", None)
    if request.headers.get("HX-Request") == "true" and not request.headers.get("HX-Boosted"):
        return render(request, "webui/htmx/notice.html", {"sentence": sentence}, status=200)
    return render(request, "webui/error.html", {"principal": principal, "title": ERROR_TITLES.get(status, "Error"),
                                                "sentence": sentence}, status=status)


def sentence(message: str) -> str:
    """An action's message ("queue 'x' does not exist") as the console writes it: "Queue 'x' does not exist."."""
    return f"{message[:1].upper()}{message[1:]}."


def field_errors(exc, rename: dict | None = None) -> dict:
    """{form input: [sentences]} for every field an ActionError names (``details.fields``, else ``details.field``);
    "form" for a refusal of no one field. ``rename`` maps the action's field names to the form's inputs."""
    fields = exc.details.get("fields") or {exc.details.get("field", "form"): [exc.message]}
    return {(rename or {}).get(name, name): [sentence(m) for m in messages] for name, messages in fields.items()}


def forbidden(request, sentence: str):
    return error_page(request, 403, sentence)


def confirmation(request, *, title: str, consequence: str, undo: str, word: str, word_label: str, button: str,
                 cancel: str, hidden: tuple = (), error: str = ""):
    """The page before an action that cannot be taken back: what it does, whether it can be undone, and the
    ``word`` to type (a name, as the dead-letter purge and queue deletion ask). 400 when a typed word was wrong."""
    return page(request, "confirm.html", {"title": title, "consequence": consequence, "undo": undo, "word": word,
                                          "word_label": word_label, "button": button, "cancel": cancel,
                                          "hidden": hidden, "error": error}, status=400 if error else 200)


def confirmed(request, word: str) -> bool:
    """True when the POST carries the typed ``word`` (leading and trailing spaces aside)."""
    return request.method == "POST" and request.POST.get("confirm", "").strip() == word
