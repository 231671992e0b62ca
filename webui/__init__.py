"""The web console: server-rendered pages (Django templates with HTMX) under /console/."""
