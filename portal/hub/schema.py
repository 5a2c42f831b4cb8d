"""The hub token in the OpenAPI schema (drf-spectacular cannot infer custom authentication classes)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class HubTokenScheme(OpenApiAuthenticationExtension):
    target_class = "portal.hub.authentication.HubTokenAuthentication"
    name = "jupyterhubToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey", "in": "header", "name": "Authorization",
            "description": "`token <JupyterHub token>` as a JupyterLab server on the portal's hub sends it "
                           "($JUPYTERHUB_API_TOKEN): acts as the matched portal account with the read and submit scopes",
        }
