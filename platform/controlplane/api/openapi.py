"""The API-key security scheme of the one OpenAPI document (management API and data gateway alike)."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension

SCHEME = "apiKey"
SECURITY_SCHEME = {
    "type": "http",
    "scheme": "bearer",
    "bearerFormat": "tw_<prefix>_<secret>",
    "description": "A tenant API key (or, on the data API, a short-lived token from POST /api/v1/tokens): "
                   "`Authorization: Bearer tw_...`. Members may use HTTP Basic (user and password) on the management API.",
}


class ApiKeyScheme(OpenApiAuthenticationExtension):
    """Tells drf-spectacular how ``ApiKeyAuthentication`` authenticates (it cannot guess a custom class)."""

    target_class = "tideway_server.controlplane.api.auth.ApiKeyAuthentication"
    name = SCHEME

    def get_security_definition(self, auto_schema):
        return SECURITY_SCHEME


class MemberBasicScheme(OpenApiAuthenticationExtension):
    target_class = "tideway_server.controlplane.api.auth.MemberBasicAuthentication"
    name = "memberBasic"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "basic", "description": "A member's user name and password"}


class MemberSessionScheme(OpenApiAuthenticationExtension):
    target_class = "tideway_server.controlplane.api.auth.MemberSessionAuthentication"
    name = "memberSession"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "cookie", "name": "sessionid", "description": "A signed-in member's session"}
